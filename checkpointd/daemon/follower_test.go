package daemon

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// The retention follower reads the store as it is at its pass, not the
// view a publisher pass kept (up to a second old): a DEL in between leaves
// a held reservation that this pass must see — its release otherwise waits
// a whole interval more, and a pod of the name created again meanwhile
// (its StatefulSet deleted and created again at once) takes the address.
func TestFollowerReadsTheLatestStore(t *testing.T) {
	dataDir := t.TempDir()
	now := time.Now()
	put := func(r *reservation.Record) {
		t.Helper()
		if err := boltstore.New(dataDir, time.Second).Update("cbr0", func(tx reservation.Txn) error { return tx.Put(r) }); err != nil {
			t.Fatal(err)
		}
	}
	rec := func(state reservation.State) *reservation.Record {
		r := &reservation.Record{IP: netip.MustParseAddr("10.244.1.7"), State: state, UID: "p0", PodName: "db-0",
			Identity: reservation.Identity{Namespace: "db", Name: "db-0", IfName: "eth0"}, Duration: 10 * time.Minute,
			StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "s1", Why: "kept"}, AllocatedAt: now.Add(-time.Minute)}
		if state == reservation.Allocated {
			r.ContainerID, r.IfName = "c0", "eth0"
		} else {
			r.LastContainerID, r.ReleasedAt, r.ExpiresAt = "c0", now, now.Add(10*time.Minute)
		}
		return r
	}
	put(rec(reservation.Allocated))
	o := &observed{store: ipamstore.New(dataDir, time.Second, slog.New(slog.DiscardHandler))}
	if _, err := o.Entries(); err != nil { // a publisher pass
		t.Fatal(err)
	}
	put(rec(reservation.Reserved)) // the pod's DEL: held
	if es, err := o.Entries(); err != nil || len(es) != 1 || es[0].Held() {
		t.Fatalf("the publisher's view within its pass: %v, %v; want the allocation it read (else this test shows nothing)", es, err)
	}
	es, err := o.forFollower().Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || !es[0].Held() {
		t.Fatalf("the follower's entries after the DEL: %+v; want the held reservation", es)
	}
}
