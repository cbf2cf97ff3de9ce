package ipam

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// A pod author's stickyip.io/identity: db-0 is not the
// StatefulSet pod db-0. The pod mimic, annotated with it, neither gets db-0's
// reserved address nor makes it stop being db-0's; db-0 re-created gets it.
func TestKeyedIdentityIsNotThePodOfThatName(t *testing.T) {
	w := newWorld(t, v4Small)
	db0 := pod{ns: "prod", name: "db-0", uid: "u1", keep: time.Hour}
	ip := w.mustAdd("c1", db0)
	w.del("c1")
	mimic := pod{ns: "prod", name: contract.KeyedIdentity("db-0"), uid: "u2", keep: time.Hour}
	if got := w.mustAdd("c2", mimic); slices.Equal(got, ip) {
		t.Fatalf("a pod annotated stickyip.io/identity: db-0 got db-0's reserved %v", ip)
	}
	if st := w.stateOf(ip[0]); st != reservation.Reserved {
		t.Fatalf("db-0's address is %s after the mimic's ADD; want still reserved", st)
	}
	db0.uid = "u3"
	if got := w.mustAdd("c3", db0); !slices.Equal(got, ip) {
		t.Fatalf("db-0 re-created got %v, want its reserved %v", got, ip)
	}
	// And the other way round: the identity's reservation is not the pod's.
	w.del("c2")
	cache := pod{ns: "prod", name: contract.KeyedIdentity("cache"), uid: "u4", keep: time.Hour}
	cip := w.mustAdd("c4", cache)
	w.del("c4")
	if got := w.mustAdd("c5", pod{ns: "prod", name: "cache", uid: "u5", keep: time.Hour}); slices.Equal(got, cip) {
		t.Fatalf("the pod named cache got the identity cache's reserved %v", cip)
	}
	cache.uid = "u6"
	if got := w.mustAdd("c6", cache); !slices.Equal(got, cip) {
		t.Fatalf("identity cache came back with %v, want %v", got, cip)
	}
}

// A reservation recorded before schema 3 (Legacy: pod name and identity
// value were one) is kept across the upgrade: the keyed identity of its
// name gets it back, and so would the pod of that name, as before; once
// taken over, the record is of the new, unambiguous form.
func TestLegacyReservationAnswersBothForms(t *testing.T) {
	for _, who := range []string{contract.KeyedIdentity("cache"), "cache"} {
		t.Run(who, func(t *testing.T) {
			w := newWorld(t, v4Small)
			w.putRecord(&reservation.Record{
				IP: netip.MustParseAddr("10.1.0.5"), State: reservation.Reserved, LastContainerID: "old",
				Identity:    reservation.Identity{Namespace: "prod", Name: "cache", IfName: "eth0", Legacy: true},
				Duration:    time.Hour,
				AllocatedAt: w.now.Add(-time.Hour), ReleasedAt: w.now.Add(-time.Minute), ExpiresAt: w.now.Add(time.Hour),
			})
			if got := w.mustAdd("c1", pod{ns: "prod", name: who, uid: "u1", keep: time.Hour}); !slices.Equal(got, []string{"10.1.0.5"}) {
				t.Fatalf("%s got %v, want the legacy reservation 10.1.0.5", who, got)
			}
			for _, r := range w.records() {
				if r.IP == netip.MustParseAddr("10.1.0.5") && (r.Identity.Legacy || r.Identity.Name != who) {
					t.Fatalf("taken over record %+v; want identity %s, not legacy", r.Identity, who)
				}
			}
		})
	}
}

// A legacy reservation is not another identity's: a stranger asking for
// it is refused, and a pool-full eviction counts it as held.
func TestLegacyReservationRefusedToStrangers(t *testing.T) {
	w := newWorld(t, v4Small)
	w.putRecord(&reservation.Record{
		IP: netip.MustParseAddr("10.1.0.5"), State: reservation.Reserved, LastContainerID: "old",
		Identity:    reservation.Identity{Namespace: "prod", Name: "cache", IfName: "eth0", Legacy: true},
		Duration:    time.Hour,
		AllocatedAt: w.now.Add(-time.Hour), ReleasedAt: w.now.Add(-time.Minute), ExpiresAt: w.now.Add(time.Hour),
	})
	if _, err := w.add("c1", pod{ns: "prod", name: contract.KeyedIdentity("other"), uid: "u1"}, "10.1.0.5"); err == nil {
		t.Fatal("another identity took the legacy reservation by asking for it")
	}
}
