package retention

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/fake"
)

// store is the node's IPAM store on the in-memory one, the engine's
// Retain applying the changes as ipamstore.Store does.
type store struct{ s *fake.Store }

func (s store) Entries() ([]reservation.Entry, error) {
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
	rec       *placementv1.NodeRecord
	ok, known bool
	listed    bool
}

func (v *verdicts) Record() (*placementv1.NodeRecord, bool) { return v.rec, v.listed }
func (v *verdicts) Served() (bool, bool)                    { return v.ok, v.known }
func (v *verdicts) Changed() <-chan struct{}                { return nil }

// watched is a record a watch delivers: set changes it and says so.
type watched struct {
	mu      sync.Mutex
	rec     *placementv1.NodeRecord
	changed chan struct{}
}

func (w *watched) Record() (*placementv1.NodeRecord, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rec, true
}
func (w *watched) Served() (bool, bool)     { return true, true }
func (w *watched) Changed() <-chan struct{} { return w.changed }
func (w *watched) set(rec *placementv1.NodeRecord) {
	w.mu.Lock()
	w.rec = rec
	w.mu.Unlock()
	w.changed <- struct{}{}
}

// A held reservation (db-2's, its pod deleted) and a running StatefulSet
// pod's allocation (db-0's) on a store, and the follower as the daemon
// runs it.
func newFollower(t *testing.T, v Verdicts) (*Follower, store) {
	t.Helper()
	s := store{fake.New()}
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

// A verdict reaches the store as soon as the record brings it, not at the
// next tick: a running pod whose StatefulSet was deleted (its volume
// claims with it) must lose its reservation before its DEL, which may come
// within a second, or a pod of the name created again right after takes
// the held address.
func TestFollowerAppliesAVerdictAtOnce(t *testing.T) {
	w := &watched{rec: record(claim("db-0", "p0", true, hold("kept while StatefulSet db exists"))), changed: make(chan struct{}, 1)}
	f, st := newFollower(t, w)
	s := &locked{s: st} // read here while the follower writes
	f.opts.Store, f.opts.Interval = s, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for s.get(t, "10.0.0.3").StatefulSet == nil { // the first pass
		if time.Now().After(deadline) {
			t.Fatal("the follower's first pass did not follow db-0")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.set(record(claim("db-0", "p0", true, release("StatefulSet db was deleted"))))
	for {
		if r := s.get(t, "10.0.0.3"); r.Duration == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("db-0 %+v 5 s after the Release verdict came (the tick is an hour): want its reservation given up", s.get(t, "10.0.0.3"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// locked is a store the test reads while the follower runs.
type locked struct {
	mu sync.Mutex
	s  store
}

func (l *locked) Entries() ([]reservation.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Entries()
}

func (l *locked) Retain(network string, cs []ipam.RetentionChange) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Retain(network, cs)
}

func (l *locked) get(t *testing.T, ip string) reservation.Record {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	return *l.s.get(t, ip)
}

// checkpointd_retention_held counts the reservations a StatefulSet keeps on
// the node: db-2's, not the running db-0's.
func TestFollowerCountsHeld(t *testing.T) {
	f, _ := newFollower(t, &verdicts{ok: true, known: true, listed: true, rec: record()})
	f.Pass()
	if got := testutil.ToFloat64(f.held); got != 1 {
		t.Fatalf("checkpointd_retention_held %v, want 1 (db-2's reservation)", got)
	}
}
