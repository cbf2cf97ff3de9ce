package retention

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/fake"
)

// store is the node's IPAM store on the in-memory one, the engine's
// Retain applying the changes as ipamstore.Store does; one call at a time,
// as the bbolt store's lock has it.
type store struct {
	s  *fake.Store
	mu *sync.Mutex
}

func (s store) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []reservation.Entry
	err := s.s.View("cbr0", func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error {
			out = append(out, reservation.Entry{Network: "cbr0", Record: r})
			return nil
		})
	})
	return out, err
}

func (s store) Retain(network string, cs []ipam.RetentionChange) (n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.s.Update(network, func(tx reservation.Txn) error {
		n, err = ipam.Retain(tx, cs, nil)
		return err
	})
	if errors.Is(err, reservation.ErrNoChange) {
		err = nil
	}
	return n, err
}

func (s store) get(t *testing.T, ip string) *reservation.Record {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var r *reservation.Record
	err := s.s.View("cbr0", func(tx reservation.Txn) (err error) {
		r, err = tx.Get(netip.MustParseAddr(ip))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

type verdicts struct {
	mu        sync.Mutex
	rec       *placementv1.NodeRecord
	ok, known bool
	listed    bool
	changed   chan struct{}
}

func (v *verdicts) Record() (*placementv1.NodeRecord, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rec, v.listed
}

func (v *verdicts) Served() (bool, bool)     { return v.ok, v.known }
func (v *verdicts) Changed() <-chan struct{} { return v.changed }

// A held reservation (db-2's, its pod deleted) and a running StatefulSet
// pod's allocation (db-0's) on a store, and the follower as the daemon
// runs it.
func newFollower(t *testing.T, v Verdicts) (*Follower, store) {
	t.Helper()
	s := store{s: fake.New(), mu: &sync.Mutex{}}
	err := s.s.Update("cbr0", func(tx reservation.Txn) error {
		for _, e := range []reservation.Entry{entry("10.0.0.2", "db-2", "p2", reservation.Reserved, followed),
			entry("10.0.0.3", "db-0", "p0", reservation.Allocated, nil)} {
			if err := tx.Put(e.Record); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Verdicts: v, Store: s, Interval: time.Second, Now: func() time.Time { return now }}), s
}

// What a user notices of each state of the API: the held address stays
// held while nothing is known; it lasts its own duration from now when
// following is off or refused; it is freed when the controller says its
// volume claim is gone; a running StatefulSet pod is followed.
func TestFollower(t *testing.T) {
	t.Run("API not heard yet: nothing changes", func(t *testing.T) {
		f, s := newFollower(t, &verdicts{})
		if got := f.Pass(); len(got) != 0 || !s.get(t, "10.0.0.2").Held() {
			t.Fatalf("changes %+v; db-2 %+v, want still held", got, s.get(t, "10.0.0.2"))
		}
	})
	for name, v := range map[string]Verdicts{"following off (the flag)": nil, "the API refuses the record": &verdicts{known: true}} {
		t.Run(name+": held lasts its own duration from now", func(t *testing.T) {
			f, s := newFollower(t, v)
			f.Pass()
			r := s.get(t, "10.0.0.2")
			if r == nil || r.Held() || !r.ExpiresAt.Equal(now.Add(r.Duration)) {
				t.Fatalf("db-2 after the pass: %+v, want a reservation until %v", r, now.Add(10*time.Minute))
			}
			if r := s.get(t, "10.0.0.3"); r.StatefulSet != nil {
				t.Fatalf("db-0 followed %+v with following off", r.StatefulSet)
			}
		})
	}
	t.Run("the controller's verdicts applied", func(t *testing.T) {
		v := &verdicts{ok: true, known: true, listed: true, rec: record(
			claim("db-2", "p2", true, release("its volume claim was deleted with the pod")),
			claim("db-0", "p0", true, hold("kept while StatefulSet db exists")))}
		f, s := newFollower(t, v)
		f.Pass()
		if r := s.get(t, "10.0.0.2"); r != nil {
			t.Fatalf("db-2 after Release: %+v, want its address free", r)
		}
		if r := s.get(t, "10.0.0.3"); r.StatefulSet == nil || r.StatefulSet.UID != "s1" || r.StatefulSet.Why != "kept while StatefulSet db exists" {
			t.Fatalf("db-0 after the pass: follows %+v, want StatefulSet db (s1) with the controller's account", r.StatefulSet)
		}
		if got := f.Pass(); len(got) != 0 {
			t.Fatalf("a second pass changed %+v, want nothing", got)
		}
	})
}

// A Release written by the controller reaches the store as soon as the
// record changes, not at the follower's next tick: a StatefulSet deleted
// (whenDeleted: Delete) and created again at once must not hand its new
// pod the old address.
func TestFollowerActsOnTheRecordsChange(t *testing.T) {
	v := &verdicts{ok: true, known: true, listed: true, rec: record(), changed: make(chan struct{}, 1)}
	f, s := newFollower(t, v)
	f.opts.Interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)
	time.Sleep(50 * time.Millisecond) // the first pass, with no verdict yet
	if r := s.get(t, "10.0.0.2"); r == nil || !r.Held() {
		t.Fatalf("db-2 before the verdict: %+v, want held", r)
	}
	v.mu.Lock()
	v.rec = record(claim("db-2", "p2", true, release("its StatefulSet was deleted (whenDeleted: Delete)")))
	v.mu.Unlock()
	v.changed <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for s.get(t, "10.0.0.2") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the Release did not reach the store within 5 s of the record's change (the next tick is an hour away)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
