package retention

import (
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func entry(ip, name, uid string, state reservation.State, set *reservation.StatefulSetRef) reservation.Entry {
	if set != nil {
		c := *set // each record its own: the engine changes a record's in place
		set = &c
	}
	r := &reservation.Record{IP: netip.MustParseAddr(ip), State: state, UID: uid, Duration: 10 * time.Minute,
		Identity: reservation.Identity{Namespace: "db", Name: name, IfName: "eth0"}, StatefulSet: set,
		AllocatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-time.Minute)}
	if state == reservation.Reserved {
		r.ReleasedAt = now.Add(-11 * time.Minute)
	} else {
		r.ContainerID, r.IfName = "c-"+name, "eth0"
	}
	return reservation.Entry{Network: "cbr0", Record: r}
}

func record(claims ...placementv1.Claim) *placementv1.NodeRecord {
	return &placementv1.NodeRecord{Spec: placementv1.NodeRecordSpec{NodeUID: "n1"}, Status: placementv1.NodeRecordStatus{NodeUID: "n1", Claims: claims}}
}

func claim(name, pod string, indexed bool, r *placementv1.Retention) placementv1.Claim {
	return placementv1.Claim{Namespace: "db", Identity: name, Pod: name, PodUID: placementv1UID(pod), Indexed: indexed, StatefulSet: r}
}

func placementv1UID(s string) types.UID { return types.UID(s) }

func hold(why string) *placementv1.Retention {
	return &placementv1.Retention{Name: "db", UID: "s1", Owner: placementv1.OwnerStatefulSet, Verdict: placementv1.Hold, Why: why}
}

func release(why string) *placementv1.Retention {
	return &placementv1.Retention{Name: "db", UID: "s1", Owner: placementv1.OwnerPod, Verdict: placementv1.Release, Why: why}
}

var followed = &reservation.StatefulSetRef{Name: "db", UID: "s1", Why: "kept"}

// TestDecide walks every row of Decide's table: what the node does with
// its records for each verdict of the controller, and with following on
// and off.
func TestDecide(t *testing.T) {
	fixed := entry("10.0.0.9", "db-9", "p9", reservation.Allocated, nil)
	fixed.Retention = contract.RetentionFixed
	keyed := entry("10.0.0.8", "identity:cache", "p8", reservation.Allocated, nil)
	unsticky := entry("10.0.0.7", "db-7", "p7", reservation.Allocated, nil)
	unsticky.Duration = 0
	for _, tc := range []struct {
		name      string
		entries   []reservation.Entry
		rec       *placementv1.NodeRecord
		following bool
		want      []ipam.RetentionChange // in order; At is now unless the row says
	}{
		{"off: a held reservation lasts its own duration from now", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			nil, false, []ipam.RetentionChange{{Action: ipam.Expire, Name: "db-2", Why: WhyOff}}},
		{"off: a running pod is not followed", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, nil)},
			record(claim("db-2", "p2", true, hold("kept"))), false, nil},
		{"on, no record: nothing on a guess", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			nil, true, nil},
		{"on, claims judged under another Node UID: nothing", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			&placementv1.NodeRecord{Spec: placementv1.NodeRecordSpec{NodeUID: "n2"}, Status: placementv1.NodeRecordStatus{NodeUID: "n1",
				Claims: []placementv1.Claim{claim("db-2", "p2", true, release("deleted with its pod"))}}}, true, nil},
		{"on: a running StatefulSet pod is followed", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, nil)},
			record(claim("db-2", "p2", true, hold("kept"))), true,
			[]ipam.RetentionChange{{Action: ipam.FollowPod, Name: "db-2", UID: "p2", StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "s1", Why: "kept"}}}},
		{"on: one followed already is left", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, followed)},
			record(claim("db-2", "p2", true, hold("kept"))), true, nil},
		{"on: the claim of another pod is not this allocation's", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, nil)},
			record(claim("db-2", "p-other", true, hold("kept"))), true, nil},
		{"on: a pod asking a fixed reservation is not followed", []reservation.Entry{fixed},
			record(claim("db-9", "p9", true, hold("kept"))), true, nil},
		{"on: a keyed identity follows nothing", []reservation.Entry{keyed},
			record(claim("identity:cache", "p8", true, hold("kept"))), true, nil},
		{"on: an allocation without a reservation duration (another network's, say) is not followed", []reservation.Entry{unsticky},
			record(claim("db-7", "p7", true, hold("kept"))), true, nil},
		{"on: a pod without StatefulSet is left", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, nil)},
			record(claim("db-2", "p2", true, nil)), true, nil},
		{"on: Release for a running pod (its StatefulSet went with its claims): its DEL will free the address",
			[]reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, followed)},
			record(claim("db-2", "p2", true, release("StatefulSet db was deleted"))), true,
			[]ipam.RetentionChange{{Action: ipam.Release, Name: "db-2", UID: "p2", Why: "StatefulSet db was deleted"}}},
		{"on: Release said of another pod leaves the running allocation", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Allocated, followed)},
			record(claim("db-2", "p-other", true, release("deleted"))), true, nil},
		{"on: Release leaves a running pod that asked a fixed reservation", []reservation.Entry{fixed},
			record(claim("db-9", "p9", true, release("deleted"))), true, nil},
		{"on: Release releases the held reservation", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p2", true, release("its volume claim was deleted with the pod"))), true,
			[]ipam.RetentionChange{{Action: ipam.Release, Name: "db-2", Why: "its volume claim was deleted with the pod"}}},
		{"on: Release said of another pod is not this reservation's", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p3", true, release("deleted"))), true, nil},
		{"on: Release said of another StatefulSet (UID) is not this reservation's",
			[]reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, &reservation.StatefulSetRef{Name: "db", UID: "s0", Why: "kept"})},
			record(claim("db-2", "p2", true, release("deleted"))), true, nil},
		{"on: Hold with the same account changes nothing", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p2", true, hold("kept"))), true, nil},
		{"on: Hold with a new account refreshes it", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p2", true, hold("kept after its StatefulSet's deletion (whenDeleted: Retain)"))), true,
			[]ipam.RetentionChange{{Action: ipam.Refresh, Name: "db-2", Why: "kept after its StatefulSet's deletion (whenDeleted: Retain)",
				StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "s1", Why: "kept after its StatefulSet's deletion (whenDeleted: Retain)"}}}},
		{"on: claimed later elsewhere, the pod runs there: its own duration from now",
			[]reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p2", false, hold("kept"))), true,
			[]ipam.RetentionChange{{Action: ipam.Expire, Name: "db-2", MovedTo: "another node", Why: WhyLater}}},
		{"on: a reservation nothing holds is left (no claim)", []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed)},
			record(), true, nil},
		{"on: one identity on two interfaces is released once",
			[]reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed), entry("fd00::2", "db-2", "p2", reservation.Reserved, followed)},
			record(claim("db-2", "p2", true, release("deleted"))), true,
			[]ipam.RetentionChange{{Action: ipam.Release, Name: "db-2", Why: "deleted"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.entries, tc.rec, tc.following, WhyOff, now)["cbr0"]
			if len(got) != len(tc.want) {
				t.Fatalf("changes %+v, want %+v", got, tc.want)
			}
			for i, w := range tc.want {
				w.Namespace, w.At = "db", now
				g := got[i]
				if g.Action != w.Action || g.Namespace != w.Namespace || g.Name != w.Name || g.UID != w.UID || !g.At.Equal(w.At) ||
					g.MovedTo != w.MovedTo || g.Why != w.Why || !sameSet(g.StatefulSet, w.StatefulSet) {
					t.Errorf("change %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func sameSet(a, b *reservation.StatefulSetRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
