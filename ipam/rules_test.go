package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// A range's gateway, network and (IPv4) broadcast addresses are refused
// from every request, whatever rangeStart and rangeEnd say; IPv6's last
// address is an ordinary one.
func TestRequestedUnassignableAddresses(t *testing.T) {
	for _, tc := range []struct {
		name, ipam, ip, why string // why "": granted
	}{
		{"v4 gateway", v4Small, "10.1.0.1", "the gateway of subnet 10.1.0.0/29"},
		{"v4 network", v4Small, "10.1.0.0", "the network address of subnet 10.1.0.0/29"},
		{"v4 broadcast", v4Small, "10.1.0.7", "the broadcast address of subnet 10.1.0.0/29"},
		{"v4 range stretched over network", `{"subnet":"10.1.0.0/29","rangeStart":"10.1.0.0","rangeEnd":"10.1.0.7"}`, "10.1.0.0", "network address"},
		{"v4 range stretched over broadcast", `{"subnet":"10.1.0.0/29","rangeStart":"10.1.0.0","rangeEnd":"10.1.0.7"}`, "10.1.0.7", "broadcast address"},
		{"v4 gateway elsewhere", `{"subnet":"10.1.0.0/29","gateway":"10.1.0.6"}`, "10.1.0.6", "the gateway of subnet 10.1.0.0/29"},
		{"v4 default gateway address when the gateway is elsewhere", `{"subnet":"10.1.0.0/29","gateway":"10.1.0.6"}`, "10.1.0.1", ""},
		{"gateway of the other range of the set", `{"ranges":[[{"subnet":"10.1.0.0/29"},{"subnet":"10.1.0.8/29","gateway":"10.1.0.3"}]]}`, "10.1.0.3", "the gateway of subnet 10.1.0.8/29"},
		{"v6 gateway", `{"subnet":"fd00::/125"}`, "fd00::1", "the gateway of subnet fd00::/125"},
		{"v6 subnet-router anycast", `{"subnet":"fd00::/125","rangeStart":"fd00::"}`, "fd00::", "the network address of subnet fd00::/125"},
		{"v6 last address", `{"subnet":"fd00::/125"}`, "fd00::7", ""},
		{"dual-stack v6 gateway", `{"ranges":[[{"subnet":"10.1.0.0/29"}],[{"subnet":"fd77::/64"}]]}`, "fd77::1", "the gateway of subnet fd77::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.ipam)
			got, err := w.add("c1", anon(1), tc.ip)
			if tc.why == "" {
				if err != nil || !slices.Contains(got, tc.ip) {
					t.Fatalf("asking for %s: %v, %v; want it granted", tc.ip, got, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), tc.ip) {
				t.Fatalf("asking for %s: %v; want ErrInvalidRequest saying it is %s", tc.ip, err, tc.why)
			}
			if len(w.records()) != 0 {
				t.Fatalf("a refused request left records: %+v", w.records())
			}
		})
	}
}

// Dynamic allocation never hands them out either, even when rangeStart and
// rangeEnd include them.
func TestDynamicAllocationSkipsUnassignable(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		want       []string
	}{
		{"v4 stretched range", `{"subnet":"10.1.0.0/29","rangeStart":"10.1.0.0","rangeEnd":"10.1.0.7"}`,
			[]string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5", "10.1.0.6"}},
		{"v4 gateway in the middle", `{"subnet":"10.1.0.0/29","gateway":"10.1.0.4"}`,
			[]string{"10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.5", "10.1.0.6"}},
		{"v6 includes the last address", `{"subnet":"fd00::/125","rangeStart":"fd00::"}`,
			[]string{"fd00::2", "fd00::3", "fd00::4", "fd00::5", "fd00::6", "fd00::7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.ipam)
			var got []string
			for i := range len(tc.want) {
				got = append(got, w.mustAdd(fmt.Sprintf("c%d", i), anon(i))...)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("allocated %v, want %v", got, tc.want)
			}
			if _, err := w.add("one-more", anon(99)); !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("with every assignable address taken: %v, want ErrPoolExhausted", err)
			}
			// stickyip status counts the same: every address it hands out, all allocated.
			var sets []SetSummary
			if err := w.store.View("net1", func(tx reservation.Txn) (err error) { sets, _, err = w.eng.Summary(tx, w.now); return err }); err != nil ||
				sets[0].Size != len(tc.want) || sets[0].Allocated != len(tc.want) || sets[0].Free != 0 {
				t.Fatalf("Summary = %+v, %v; want size %d, all allocated", sets, err, len(tc.want))
			}
		})
	}
}

// putRecord writes a record as an earlier stickyip (which granted requested
// gateways) may have left it.
func (w *world) putRecord(r *reservation.Record) {
	w.t.Helper()
	if r.AllocatedAt.IsZero() {
		r.AllocatedAt = w.now.Add(-time.Hour)
	}
	if err := w.store.Update("net1", func(tx reservation.Txn) error { return tx.Put(r) }); err != nil {
		w.t.Fatal(err)
	}
}

// A store written by an earlier version may hold records on the gateway:
// the pool-full path never hands them out, an identity that held one gets
// another address, and their DEL drops them instead of reserving them or
// letting them cool.
func TestEarlierVersionsGatewayRecords(t *testing.T) {
	gw := netip.MustParseAddr("10.1.0.1")
	attacker := reservation.Identity{Namespace: "tenant", Name: "x", IfName: "eth0"}
	t.Run("reserved or cooling on the gateway, pool full", func(t *testing.T) {
		for _, st := range []reservation.State{reservation.Reserved, reservation.Cooling} {
			w := newWorld(t, v4Small)
			w.eng.reuseDelay = time.Minute
			r := &reservation.Record{IP: gw, State: st, ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Minute), Duration: time.Hour}
			if st == reservation.Reserved {
				r.Identity = attacker
			} else {
				r.LastIdentity = attacker
			}
			w.putRecord(r)
			for i := range 5 {
				w.mustAdd(fmt.Sprintf("c%d", i), anon(i))
			}
			if got, err := w.add("victim", anon(9)); !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("%s gateway record in a full pool: the next pod got %v, %v; want ErrPoolExhausted", st, got, err)
			}
		}
	})
	t.Run("the identity that reserved the gateway gets another address", func(t *testing.T) {
		w := newWorld(t, v4Small)
		w.putRecord(&reservation.Record{IP: gw, State: reservation.Reserved, Identity: attacker, Duration: time.Hour,
			ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Hour)})
		got := w.mustAdd("c1", pod{ns: "tenant", name: "x", uid: "x2", keep: time.Hour})
		if got[0] == gw.String() || w.stateOf(gw.String()) != "" {
			t.Fatalf("tenant/x got %v; gateway record %q; want another address and the record dropped", got, w.stateOf(gw.String()))
		}
	})
	t.Run("DEL drops an allocation on the gateway", func(t *testing.T) {
		for _, keep := range []time.Duration{0, time.Hour} {
			w := newWorld(t, v4Small)
			w.eng.reuseDelay = time.Minute
			w.putRecord(&reservation.Record{IP: gw, State: reservation.Allocated, ContainerID: "c-gw", IfName: "eth0",
				Identity: attacker, Duration: keep, BootID: "boot-1"})
			w.del("c-gw")
			if st := w.stateOf(gw.String()); st != "" {
				t.Fatalf("keep %v: after the DEL the gateway is %q; want no record", keep, st)
			}
		}
	})
	t.Run("stickyip check names each record on an unassignable address and what becomes of it", func(t *testing.T) {
		w := newWorld(t, v4Small)
		w.putRecord(&reservation.Record{IP: gw, State: reservation.Reserved, Identity: attacker, Duration: time.Hour,
			ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Hour)})
		w.putRecord(&reservation.Record{IP: netip.MustParseAddr("10.1.0.7"), State: reservation.Allocated, ContainerID: "c-bc", IfName: "eth0", BootID: "boot-1"})
		w.putRecord(&reservation.Record{IP: netip.MustParseAddr("10.1.0.0"), State: reservation.Cooling, LastIdentity: attacker,
			ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Minute)})
		w.mustAdd("c1", anon(1))
		var got []string
		if err := w.store.View("net1", func(tx reservation.Txn) (err error) { got, err = w.eng.UnassignableRecords(tx); return err }); err != nil {
			t.Fatal(err)
		}
		all := strings.Join(got, "\n")
		if len(got) != 3 || !strings.Contains(all, "10.1.0.1 is the gateway") || !strings.Contains(all, "`stickyip release tenant/x` drops it") ||
			!strings.Contains(all, "10.1.0.7 is the broadcast address") || !strings.Contains(all, "delete that pod") ||
			!strings.Contains(all, "10.1.0.0 is the network address") || !strings.Contains(all, "dropped when its delay ends") {
			t.Fatalf("UnassignableRecords:\n%s\nwant the gateway, broadcast and network records, each with its fate", all)
		}
	})
	t.Run("a retried ADD of the sandbox holding the gateway gets another address", func(t *testing.T) {
		w := newWorld(t, v4Small)
		w.putRecord(&reservation.Record{IP: gw, State: reservation.Allocated, ContainerID: "c-gw", IfName: "eth0", Identity: attacker, BootID: "boot-1"})
		got := w.mustAdd("c-gw", pod{ns: "tenant", name: "x"})
		if got[0] == gw.String() || len(w.records()) != 1 {
			t.Fatalf("retried ADD got %v, records %+v; want one record, not the gateway", got, w.records())
		}
	})
}

// Pool-full eviction is fair: the requester's own namespace gives way
// first (its reservation closest to expiry), then the namespace holding the
// most; never another namespace's while the requester's holds one.
func TestEvictionIsFair(t *testing.T) {
	type resv struct {
		ns, name string
		left     time.Duration // until expiry
	}
	for _, tc := range []struct {
		name      string
		reserved  []resv
		requester pod
		want      string // the evicted identity
	}{
		{"own namespace first, even expiring last",
			[]resv{{"prod", "db-0", 1 * time.Minute}, {"tenant", "a", 167 * time.Hour}, {"tenant", "b", 168 * time.Hour}},
			pod{ns: "tenant", name: "next", uid: "n"}, "tenant/a"},
		{"then the namespace holding the most",
			[]resv{{"prod", "db-0", 1 * time.Minute}, {"team-a", "a", 3 * time.Hour}, {"team-a", "b", 2 * time.Hour}, {"team-b", "c", time.Hour}},
			pod{ns: "fresh", name: "p", uid: "p"}, "team-a/b"},
		{"ties: the one closest to expiry",
			[]resv{{"team-b", "c", 4 * time.Hour}, {"team-a", "a", 3 * time.Hour}, {"team-b", "d", 2 * time.Hour}, {"team-a", "b", 5 * time.Hour}},
			pod{ns: "fresh", name: "p", uid: "p"}, "team-b/d"},
		{"a call without pod arguments: the namespace holding the most",
			[]resv{{"prod", "db-0", 1 * time.Minute}, {"tenant", "a", 168 * time.Hour}, {"tenant", "b", 167 * time.Hour}},
			pod{}, "tenant/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, `{"subnet":"10.1.0.0/29","rangeEnd":"10.1.0.`+fmt.Sprint(1+len(tc.reserved))+`"}`)
			for i, r := range tc.reserved {
				p := pod{ns: r.ns, name: r.name, uid: r.name, keep: r.left}
				w.mustAdd("c"+fmt.Sprint(i), p)
				w.del("c" + fmt.Sprint(i))
			}
			before := map[string]string{}
			for _, r := range w.records() {
				before[r.Identity.Pod()] = r.IP.String()
			}
			got, err := w.add("new", tc.requester)
			if err != nil || len(got) != 1 || got[0] != before[tc.want] {
				t.Fatalf("got %v, %v; want %s's %s", got, err, tc.want, before[tc.want])
			}
			if len(w.records()) != len(tc.reserved) {
				t.Fatalf("exactly one reservation should give way: %+v", w.records())
			}
		})
	}
}

// The scenario: a namespace parks pods with week-long reservations
// on a full node; its next pod gets one of its own addresses, never
// prod/db-0's, however close to expiry that one is.
func TestParkedReservationsCannotTakeAnotherNamespaces(t *testing.T) {
	w := newWorld(t, v4Small) // .2-.6
	w.mustAdd("db", pod{ns: "prod", name: "db-0", uid: "db", keep: 30 * time.Minute})
	w.del("db")
	for i := range 4 {
		w.mustAdd(fmt.Sprint("park", i), pod{ns: "tenant", name: fmt.Sprint("park-", i), uid: fmt.Sprint(i), keep: 168 * time.Hour})
	}
	for i := range 4 {
		w.del(fmt.Sprint("park", i))
	}
	w.now = w.now.Add(29 * time.Minute)
	dbIP := ""
	for _, r := range w.records() {
		if r.Identity.Pod() == "prod/db-0" {
			dbIP = r.IP.String()
		}
	}
	for i := range 4 {
		got := w.mustAdd(fmt.Sprint("next", i), pod{ns: "tenant", name: fmt.Sprint("next-", i), uid: fmt.Sprint("n", i)})
		if got[0] == dbIP {
			t.Fatalf("tenant's pod %d got prod/db-0's reserved %s", i, dbIP)
		}
	}
	// Only once tenant holds no reservation does another namespace's give
	// way (the one holding the most): here prod's, the only one left. On a
	// real node tenant's running pods are bounded by the kubelet's maxPods,
	// and its reservations by reservation.maxPerNamespace.
	if got := w.mustAdd("next4", pod{ns: "tenant", name: "next-4", uid: "n4"}); got[0] != dbIP {
		t.Fatalf("with tenant holding no reservation the full pool gave %v, want prod/db-0's %s", got, dbIP)
	}
}

// reservation.maxPerNamespace: a DEL beyond the bound frees (the address
// cools, remembering its last holder) instead of reserving; other
// namespaces are not affected; a dual-stack pod counts once.
func TestMaxPerNamespace(t *testing.T) {
	w := newWorld(t, `{"ranges":[[{"subnet":"10.1.0.0/28"}],[{"subnet":"fd00::/124"}]]}`)
	w.eng.maxPerNamespace = 2
	w.eng.reuseDelay = time.Minute
	keep := func(ns, name string) pod { return pod{ns: ns, name: name, uid: ns + name, keep: time.Hour} }
	addrs := map[string][]string{}
	for _, p := range []pod{keep("tenant", "a"), keep("tenant", "b"), keep("tenant", "c"), keep("prod", "db")} {
		addrs[p.ns+"/"+p.name] = w.mustAdd("c-"+p.ns+p.name, p)
	}
	for _, p := range []string{"tenant/a", "tenant/b", "tenant/c", "prod/db"} {
		w.del("c-" + strings.ReplaceAll(p, "/", ""))
	}
	want := map[string]reservation.State{"tenant/a": reservation.Reserved, "tenant/b": reservation.Reserved,
		"tenant/c": reservation.Cooling, "prod/db": reservation.Reserved}
	for p, st := range want {
		for _, ip := range addrs[p] {
			if got := w.stateOf(ip); got != st {
				t.Errorf("%s's %s after its DEL: %q, want %q", p, ip, got, st)
			}
		}
	}
	// tenant/a comes back and takes its reservation: the namespace has room again.
	w.mustAdd("c-a2", keep("tenant", "a"))
	c2 := w.mustAdd("c-c2", keep("tenant", "c"))
	w.del("c-c2")
	for _, ip := range c2 {
		if st := w.stateOf(ip); st != reservation.Reserved {
			t.Errorf("tenant/c deleted while tenant holds one reservation: %s is %q, want reserved", ip, st)
		}
	}
}
