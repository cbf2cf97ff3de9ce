package ipam

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// A StatefulSet pod's reservation follows its StatefulSet. These
// tests drive the engine's side on the in-memory store: checkpointd's
// changes (Retain) applied to the records, and every rule a held
// reservation meets (expiry, the per-namespace bound, a full pool, the
// operator's release, a reboot, the pod's return).

// sts is StatefulSet db as checkpointd records it on db-<i>'s records.
func sts(whenScaled, whenDeleted string) *reservation.StatefulSetRef {
	return &reservation.StatefulSetRef{Name: "db", UID: "uid-sts-db", WhenScaled: whenScaled, WhenDeleted: whenDeleted}
}

func member(i int) pod {
	return pod{ns: "prod", name: fmt.Sprintf("db-%d", i), uid: fmt.Sprintf("uid-db-%d", i), keep: 10 * time.Minute}
}

// retain applies changes as checkpointd does, in one transaction, and
// returns what Retain returned (reservation.ErrNoChange included, which
// the store turns into a rollback).
func (w *world) retain(changes ...RetentionChange) (int, error) {
	w.t.Helper()
	var n int
	var inner error
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		n, inner = Retain(tx, changes, w.eng.env.Log)
		return inner
	})
	if err != nil {
		return n, err
	}
	return n, inner
}

// follow records ref on the running pod p's allocation, as checkpointd does
// once it sees the pod with its StatefulSet.
func (w *world) follow(p pod, ref *reservation.StatefulSetRef) {
	w.t.Helper()
	if n, err := w.retain(RetentionChange{Action: FollowPod, Namespace: p.ns, Name: p.name, UID: p.uid, StatefulSet: ref}); err != nil || n != 1 {
		w.t.Fatalf("FollowPod %s: %d records changed, %v; want 1", p.name, n, err)
	}
}

// housekeep runs what every CNI call runs first.
func (w *world) housekeep() {
	w.t.Helper()
	if err := w.store.Update("net1", func(tx reservation.Txn) error { _, err := w.eng.Housekeep(tx, w.now); return err }); err != nil {
		w.t.Fatal(err)
	}
}

// A followed pod's DEL leaves a reservation no clock ends: a week later,
// past its 10 minutes, every housekeeping pass keeps it, it counts as
// reserved, and the pod back (scale-up) gets its address, its new
// allocation following the StatefulSet before checkpointd has seen it.
func TestHeldReservationOutlivesItsDuration(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(2))[0]
	w.follow(member(2), sts(contract.PolicyRetain, contract.PolicyRetain))
	w.del("c1")
	r := w.record(ip)
	if r == nil || !r.Held() || !r.ExpiresAt.Equal(w.now.Add(10*time.Minute)) {
		t.Fatalf("after DEL: %+v; want a held reservation whose own end is DEL+10m", r)
	}
	w.now = w.now.Add(7 * 24 * time.Hour)
	w.mustAdd("other", anon(1)) // an ADD housekeeps
	w.del("other")
	w.housekeep()
	if r := w.record(ip); r == nil || r.State != reservation.Reserved {
		t.Fatalf("a week later: %+v; want still reserved for prod/db-2", r)
	}
	var sets []SetSummary
	_ = w.store.View("net1", func(tx reservation.Txn) (err error) { sets, _, err = w.eng.Summary(tx, w.now); return err })
	if sets[0].Reserved != 1 {
		t.Fatalf("summary %+v: a held reservation past its duration counts as reserved", sets[0])
	}
	if got := w.mustAdd("c2", member(2))[0]; got != ip {
		t.Fatalf("db-2 back after a week got %s, want %s", got, ip)
	}
	if r := w.record(ip); r.StatefulSet == nil || r.StatefulSet.Name != "db" {
		t.Fatalf("db-2's new allocation: %+v; want it to follow StatefulSet db until checkpointd sees it", r)
	}
	// Deleted again before checkpointd's next pass: still held.
	w.del("c2")
	w.now = w.now.Add(time.Hour)
	w.housekeep()
	if r := w.record(ip); r == nil || !r.Held() {
		t.Fatalf("db-2 deleted again: %+v; want held", r)
	}
}

// A pod that asks for a fixed duration (stickyip.io/retention: fixed) is
// never followed; nor is one without a reservation.
func TestFixedRetentionIsNotFollowed(t *testing.T) {
	w := newWorld(t, v4Small)
	req := AddRequest{ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/c1", UID: "uid-db-0",
		Identity: reservation.Identity{Namespace: "prod", Name: "db-0", IfName: "eth0"}, Duration: 10 * time.Minute, Retention: contract.RetentionFixed}
	if err := w.store.Update("net1", func(tx reservation.Txn) error { _, err := w.eng.Add(tx, req); return err }); err != nil {
		t.Fatal(err)
	}
	w.mustAdd("c2", pod{ns: "prod", name: "db-1", uid: "uid-db-1"}) // no reservation
	n, err := w.retain(
		RetentionChange{Action: FollowPod, Namespace: "prod", Name: "db-0", UID: "uid-db-0", StatefulSet: sts("Retain", "Retain")},
		RetentionChange{Action: FollowPod, Namespace: "prod", Name: "db-1", UID: "uid-db-1", StatefulSet: sts("Retain", "Retain")})
	if !errors.Is(err, reservation.ErrNoChange) || n != 0 {
		t.Fatalf("FollowPod of a fixed and an unreserved pod: %d changed, %v; want none", n, err)
	}
	w.del("c1")
	if r := w.record("10.1.0.2"); r == nil || r.State != reservation.Reserved || r.Held() {
		t.Fatalf("a fixed pod's DEL: %+v; want a timed reservation", r)
	}
	w.now = w.now.Add(10 * time.Minute)
	w.housekeep()
	if r := w.record("10.1.0.2"); r != nil {
		t.Fatalf("a fixed reservation after its 10 minutes: %+v; want gone", r)
	}
}

// FollowPod changes only the allocations of the pod it names (a new pod of
// the same name, its UID, is another), and with nil stops following (the
// pod has no StatefulSet, e.g. orphaned).
func TestFollowPodByUID(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(0))[0]
	if n, err := w.retain(RetentionChange{Action: FollowPod, Namespace: "prod", Name: "db-0", UID: "someone-else", StatefulSet: sts("Retain", "Retain")}); n != 0 || !errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("FollowPod of another UID: %d changed, %v", n, err)
	}
	w.follow(member(0), sts("Retain", "Retain"))
	if n, _ := w.retain(RetentionChange{Action: FollowPod, Namespace: "prod", Name: "db-0", UID: "uid-db-0", StatefulSet: sts("Retain", "Retain")}); n != 0 {
		t.Fatalf("FollowPod again with the same: %d changed, want 0 (no write)", n)
	}
	w.follow(member(0), nil)
	w.del("c1")
	if r := w.record(ip); r == nil || r.Held() || r.StatefulSet != nil {
		t.Fatalf("unfollowed pod's DEL: %+v; want a timed reservation", r)
	}
}

// Release frees a held reservation at once: no reuse delay (it ends as an
// expired one does), and a new pod may take the address; a running pod's
// allocation is never touched.
func TestReleaseHeld(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	ip1 := w.mustAdd("c1", member(1))[0]
	ip2 := w.mustAdd("c2", member(2))[0]
	w.follow(member(1), sts("Delete", "Retain"))
	w.follow(member(2), sts("Delete", "Retain"))
	w.del("c2")
	n, err := w.retain(
		RetentionChange{Action: Release, Namespace: "prod", Name: "db-1", Why: "test"}, // running: untouched
		RetentionChange{Action: Release, Namespace: "prod", Name: "db-2", Why: "scaled to 1, whenScaled Delete"})
	if err != nil || n != 1 {
		t.Fatalf("Release: %d changed, %v; want 1", n, err)
	}
	if w.stateOf(ip2) != "" || w.stateOf(ip1) != reservation.Allocated {
		t.Fatalf("after Release: db-2's %s %q, db-1's %s %q; want free and allocated", ip2, w.stateOf(ip2), ip1, w.stateOf(ip1))
	}
	if got := w.mustAdd("c3", anon(3), ip2)[0]; got != ip2 {
		t.Fatalf("a new pod asking for %s got %s", ip2, got)
	}
}

// Release with a pod's UID ends the reservation its running allocation
// would leave (its StatefulSet went with its volume claims): the DEL frees
// the address, so a pod of the name created right after (the StatefulSet
// created again) gets another one. Another pod's UID, or a pod that asked
// for a fixed reservation, is left as it is.
func TestReleaseRunningPod(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(1))[0]
	w.follow(member(1), sts("Retain", "Delete"))
	if n, err := w.retain(RetentionChange{Action: Release, Namespace: "prod", Name: "db-1", UID: "uid-other", Why: "deleted"}); n != 0 || !errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("Release of another pod's UID: %d changed, %v; want nothing", n, err)
	}
	if n, err := w.retain(RetentionChange{Action: Release, Namespace: "prod", Name: "db-1", UID: "uid-db-1", Why: "StatefulSet db was deleted"}); err != nil || n != 1 {
		t.Fatalf("Release of the running pod: %d changed, %v; want 1", n, err)
	}
	if r := w.record(ip); r == nil || r.State != reservation.Allocated || r.Duration != 0 || r.StatefulSet.Why != "StatefulSet db was deleted" {
		t.Fatalf("after Release of the running pod: %+v; want its allocation kept, without a reservation", r)
	}
	w.del("c1")
	if r := w.record(ip); r != nil && r.State == reservation.Reserved {
		t.Fatalf("the released pod's DEL: %+v; want its address not reserved", r)
	}
	again := pod{ns: "prod", name: "db-1", uid: "uid-db-1-again", keep: 10 * time.Minute}
	if got := w.mustAdd("c2", again)[0]; got == ip {
		t.Fatalf("a pod db-1 created after the DEL got the released %s", ip)
	}

	req := AddRequest{ContainerID: "c3", IfName: "eth0", Netns: "/run/netns/c3", UID: "uid-db-2",
		Identity: reservation.Identity{Namespace: "prod", Name: "db-2", IfName: "eth0"}, Duration: 10 * time.Minute, Retention: contract.RetentionFixed}
	var ip2 string
	if err := w.store.Update("net1", func(tx reservation.Txn) error {
		recs, err := w.eng.Add(tx, req)
		if err == nil {
			ip2 = recs[0].IP.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.retain(RetentionChange{Action: Release, Namespace: "prod", Name: "db-2", UID: "uid-db-2", Why: "deleted"}); n != 0 {
		t.Fatal("Release changed the allocation of a pod that asked for a fixed reservation")
	}
	w.del("c3")
	if r := w.record(ip2); r == nil || r.State != reservation.Reserved {
		t.Fatalf("the fixed pod's DEL: %+v; want its reservation", r)
	}
}

// Expire: the StatefulSet deleted with whenDeleted Retain: the reservation
// lasts its duration from then, as a fixed one.
func TestExpireHeld(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(0))[0]
	w.follow(member(0), sts("Retain", "Retain"))
	w.del("c1")
	w.now = w.now.Add(time.Hour)
	deleted := w.now
	if n, err := w.retain(RetentionChange{Action: Expire, Namespace: "prod", Name: "db-0", At: deleted, Why: "test"}); err != nil || n != 1 {
		t.Fatalf("Expire: %d, %v", n, err)
	}
	r := w.record(ip)
	if r == nil || r.Held() || !r.ExpiresAt.Equal(deleted.Add(10*time.Minute)) || !r.StatefulSet.EndedAt.Equal(deleted) {
		t.Fatalf("after Expire: %+v; want a reservation until the deletion + 10m", r)
	}
	if n, _ := w.retain(RetentionChange{Action: Expire, Namespace: "prod", Name: "db-0", At: w.now.Add(time.Minute)}); n != 0 {
		t.Fatal("Expire of a reservation no longer held changed it")
	}
	w.now = deleted.Add(10 * time.Minute)
	w.housekeep()
	if w.stateOf(ip) != "" {
		t.Fatalf("10 minutes after the StatefulSet's deletion: %q, want free", w.stateOf(ip))
	}
}

// Refresh records a changed policy (or a UID learnt) on held reservations
// only.
func TestRefreshHeld(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(0))[0]
	w.follow(member(0), &reservation.StatefulSetRef{Name: "db"})
	if n, _ := w.retain(RetentionChange{Action: Refresh, Namespace: "prod", Name: "db-0", StatefulSet: sts("Delete", "Delete")}); n != 0 {
		t.Fatal("Refresh changed a running pod's allocation")
	}
	w.del("c1")
	if n, err := w.retain(RetentionChange{Action: Refresh, Namespace: "prod", Name: "db-0", StatefulSet: sts("Delete", "Delete")}); err != nil || n != 1 {
		t.Fatalf("Refresh: %d, %v", n, err)
	}
	if r := w.record(ip); r.StatefulSet.UID != "uid-sts-db" || r.StatefulSet.WhenScaled != "Delete" {
		t.Fatalf("after Refresh: %+v", r.StatefulSet)
	}
}

// A held reservation counts against reservation.maxPerNamespace however
// long it lasts; the operator's release frees it.
func TestHeldCountsAndOperatorReleases(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.maxPerNamespace = 1
	ip0 := w.mustAdd("c0", member(0))[0]
	ip1 := w.mustAdd("c1", member(1))[0]
	w.follow(member(0), sts("Retain", "Retain"))
	w.follow(member(1), sts("Retain", "Retain"))
	w.del("c0")
	w.now = w.now.Add(24 * time.Hour)
	w.del("c1")
	if w.stateOf(ip0) != reservation.Reserved || w.stateOf(ip1) != "" {
		t.Fatalf("bound 1: db-0 %q, db-1 %q; want db-0's held reservation to count, db-1's address freed", w.stateOf(ip0), w.stateOf(ip1))
	}
	var done []PodRelease
	if err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		done, err = ReleasePod(tx, "prod", "db-0", "", slog.New(slog.DiscardHandler))
		return err
	}); err != nil || len(done) != 1 || !done[0].Dropped {
		t.Fatalf("stickyip release prod/db-0: %+v, %v", done, err)
	}
	if w.stateOf(ip0) != "" {
		t.Fatal("released held reservation still there")
	}
}

// When the range set is full, a held reservation past its own duration
// gives way to a new pod first, whatever reservation.poolFull says; one
// within its duration is a reservation like any other (poolFull: fail
// keeps it).
func TestPoolFullTakesOverdueFirst(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.1.0.0/29"}`) // .2-.6
	w.eng.policy = PoolFullFail
	ips := map[int]string{}
	for i := range 5 {
		ips[i] = w.mustAdd(fmt.Sprintf("c%d", i), member(i))[0]
		w.follow(member(i), sts("Retain", "Retain"))
	}
	w.del("c3")
	w.now = w.now.Add(time.Minute)
	w.del("c4")
	if _, err := w.add("new1", anon(1)); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("pool full of reservations within their duration, poolFull fail: %v, want ErrPoolExhausted", err)
	}
	w.now = w.now.Add(10 * time.Minute) // db-3's own 10 minutes ended first, then db-4's
	got := w.mustAdd("new1", anon(1))[0]
	if got != ips[3] || w.stateOf(ips[4]) != reservation.Reserved {
		t.Fatalf("pool full, poolFull fail: new pod got %s, db-4 %q; want db-3's %s (its duration ended first), db-4's kept",
			got, w.stateOf(ips[4]), ips[3])
	}
	if got := w.mustAdd("new2", anon(2))[0]; got != ips[4] {
		t.Fatalf("next new pod got %s, want db-4's %s", got, ips[4])
	}
	if _, err := w.add("new3", anon(3)); !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "every address is allocated") {
		t.Fatalf("nothing left: %v", err)
	}
}

// A node reboot: allocations of the previous boot become reservations
// from the boot on; a followed one is held.
func TestRebootKeepsFollowedHeld(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(0))[0]
	w.follow(member(0), sts("Retain", "Delete"))
	w.eng.env.BootID = "boot-2"
	w.now = w.now.Add(30 * 24 * time.Hour)
	w.housekeep()
	if r := w.record(ip); r == nil || !r.Held() {
		t.Fatalf("after a reboot a month later: %+v; want held", r)
	}
}

// The housekeeping a DEL of an unknown sandbox checks is not made due by a
// held reservation past its own end (nothing to drop: no commit, no sync),
// and an expired timed one behind it is still dropped.
func TestHousekeepingLooksPastHeld(t *testing.T) {
	w := newWorld(t, v4Small)
	held := w.mustAdd("c1", member(0))[0]
	w.follow(member(0), sts("Retain", "Retain"))
	w.del("c1")
	w.now = w.now.Add(time.Hour)
	var due bool
	_ = w.store.View("net1", func(tx reservation.Txn) (err error) { due, err = w.eng.housekeepingDue(tx, w.now); return err })
	if due {
		t.Fatal("housekeeping due with only a held reservation past its own end")
	}
	timed := w.mustAdd("c2", web)[0]
	w.del("c2")
	w.now = w.now.Add(10 * time.Minute)
	_ = w.store.View("net1", func(tx reservation.Txn) (err error) { due, err = w.eng.housekeepingDue(tx, w.now); return err })
	if !due {
		t.Fatal("housekeeping not due with an expired reservation behind a held one")
	}
	w.housekeep()
	if w.stateOf(timed) != "" || w.stateOf(held) != reservation.Reserved {
		t.Fatalf("housekeeping: web's expired %q, db-0's held %q", w.stateOf(timed), w.stateOf(held))
	}
}

// A change that names no action (its zero value) is refused and changes
// nothing, even on a held reservation whose account it would replace.
func TestRetainRefusesNoAction(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", member(0))[0]
	w.follow(member(0), &reservation.StatefulSetRef{Name: "db"})
	w.del("c1")
	if n, err := w.retain(RetentionChange{Namespace: "prod", Name: "db-0", StatefulSet: sts("Delete", "Delete")}); n != 0 || err == nil || errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("a change of no action: %d changed, %v; want it refused", n, err)
	}
	if r := w.record(ip); r == nil || !r.Held() || r.StatefulSet.UID != "" {
		t.Fatalf("the held reservation after a change of no action: %+v", r)
	}
}

// Release of a running pod without a reservation duration changes
// nothing: its DEL frees the address already.
func TestReleaseRunningPodWithoutReservation(t *testing.T) {
	w := newWorld(t, v4Small)
	w.mustAdd("c1", pod{ns: "prod", name: "db-3", uid: "uid-db-3"})
	if n, err := w.retain(RetentionChange{Action: Release, Namespace: "prod", Name: "db-3", UID: "uid-db-3", Why: "deleted"}); n != 0 || !errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("Release of a pod without a reservation: %d changed, %v; want nothing", n, err)
	}
}
