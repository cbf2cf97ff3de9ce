package boltstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// A new store held back (ipam.newStoreWait): the first write starts the
// wait and fails, as does every write until checkpointd looks or the wait
// runs out; nothing is created meanwhile; readers see an empty store.
func TestNewStoreWait(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	s := New(dir, time.Second).WithNewStoreWait(time.Hour)
	start := time.Now()
	for i := range 2 {
		err := s.Update("n", func(reservation.Txn) error { t.Fatal("a write ran on a store held back"); return nil })
		if !errors.Is(err, reservation.ErrAwaiting) {
			t.Fatalf("write %d: %v, want ErrAwaiting", i, err)
		}
		if !strings.Contains(err.Error(), "checkpointd has not yet read this node's placement entries") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("message: %v", err)
		}
	}
	if err := s.UpdateJournaled("n", func(reservation.Txn) error { return nil }); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("journaled write: %v, want ErrAwaiting", err)
	}
	w, ok := s.NewStoreWait()
	if !ok || w.Since.Before(start.Add(-time.Second)) || w.Until.Sub(w.Since) != time.Hour || !strings.Contains(w.By, "ipam.newStoreWait 1h0m0s") {
		t.Fatalf("wait %+v %t", w, ok)
	}
	if exists(t, s.Path()) || exists(t, s.markPath()) {
		t.Fatal("a database or mark was created while held back")
	}
	if err := s.View("n", func(tx reservation.Txn) error { return nil }); err != nil {
		t.Fatalf("read of a held-back store: %v", err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("STATUS of a held-back store: %v", err) // the node stays Ready
	}

	// checkpointd looked: the wait ends, the next write creates the store
	// and removes the file.
	w.Until, w.By = time.Now(), "checkpointd: the cluster holds nothing for this node"
	if held, err := s.HoldNew(w); !held || err != nil {
		t.Fatalf("HoldNew = %t, %v", held, err)
	}
	put(t, s, "10.0.0.1")
	if !exists(t, s.Path()) || !exists(t, s.markPath()) || exists(t, s.waitPath()) {
		t.Fatal("want the database and its mark, and no wait file")
	}
	// A store exists: nothing is held back again.
	if held, err := s.HoldNew(Wait{Since: time.Now(), Until: time.Now().Add(time.Hour)}); held || err != nil || exists(t, s.waitPath()) {
		t.Fatalf("HoldNew on a node with a store = %t, %v", held, err)
	}
	put(t, s, "10.0.0.2")
}

// Without ipam.newStoreWait, a wait another process started (checkpointd,
// with the API server away) holds all the same; one that ran out, or that
// cannot be read, holds nothing back.
func TestNewStoreWaitOfAnotherProcess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(s *Store)
		held  bool
	}{
		{"none", func(*Store) {}, false},
		{"holds", func(s *Store) {
			if held, err := s.HoldNew(Wait{Since: time.Now(), Until: time.Now().Add(time.Hour), By: "checkpointd"}); !held || err != nil {
				t.Fatal(held, err)
			}
		}, true},
		{"ran out", func(s *Store) {
			if _, err := s.HoldNew(Wait{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(-time.Second)}); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"unreadable", func(s *Store) {
			if err := os.MkdirAll(s.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.waitPath(), []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(filepath.Join(t.TempDir(), "stickyip"), time.Second)
			tc.write(s)
			err := s.Update("n", func(reservation.Txn) error { return nil })
			if tc.held != errors.Is(err, reservation.ErrAwaiting) || !tc.held && err != nil {
				t.Fatalf("write: %v, want held %t", err, tc.held)
			}
			if !tc.held && (exists(t, s.waitPath()) || !exists(t, s.Path())) {
				t.Fatal("want the store created and no wait file")
			}
		})
	}
}

// A lost store (its creation mark without its database) is never taken for
// a new one, wait or not: every call fails as lost, and checkpointd
// rebuilds it.
func TestNewStoreWaitNeverHidesALostStore(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "stickyip"), time.Second).WithNewStoreWait(time.Hour)
	if _, err := s.HoldNew(Wait{Since: time.Now(), Until: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	put(t, s, "10.0.0.1")
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if err := s.Update("n", func(reservation.Txn) error { return nil }); !errors.Is(err, reservation.ErrLost) {
		t.Fatalf("write on a lost store: %v, want ErrLost", err)
	}
	if held, err := s.HoldNew(Wait{Since: time.Now(), Until: time.Now().Add(time.Hour)}); held || !errors.Is(err, reservation.ErrLost) {
		t.Fatalf("HoldNew on a lost store = %t, %v", held, err)
	}
}

// checkpointd's new store (Replace on a data directory that never had one)
// ends the wait.
func TestReplaceEndsTheWait(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "stickyip"), time.Second).WithNewStoreWait(time.Hour)
	if err := s.Update("n", func(reservation.Txn) error { return nil }); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatal(err)
	}
	r, err := s.Replace(time.Now(), func(open func(string) (reservation.Txn, error)) error {
		_, err := open("n")
		return err
	})
	if err != nil || r.Why != nil || r.Aside != "" {
		t.Fatalf("Replace = %+v, %v", r, err)
	}
	if exists(t, s.waitPath()) || !exists(t, s.markPath()) {
		t.Fatal("want the mark and no wait file")
	}
	put(t, s, "10.0.0.1")
}
