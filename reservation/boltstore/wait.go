package boltstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// WaitFile holds back a new store while checkpointd reads what the cluster
// holds for the node: a node re-installed under the same name has nothing
// of stickyip on its disk, but its entries in the placement index list the
// addresses it held and the reservations it kept. In a data directory with
// neither a database nor a creation mark (and no witness of a lost store),
// no database is created before the wait's Until: every call that would
// create one fails with reservation.ErrAwaiting. The plugin writes it at
// its first call when told to wait (WithNewStoreWait); checkpointd writes
// it when it cannot read the cluster yet, extends it meanwhile, and ends it
// (Until set to when it looked, or its new database put in place by
// Replace). A database created removes it; a file that cannot be read
// holds nothing back (a wait must never hold for good).
const WaitFile = "stickyip.wait"

// Wait is what WaitFile says.
type Wait struct {
	// Since is when the wait began: the first call, or checkpointd's first
	// look, on a data directory without a store.
	Since time.Time `json:"since"`
	// Until is when it ends: no new database before it.
	Until time.Time `json:"until"`
	// By says who set Until last, and why.
	By string `json:"by"`
}

// Holds reports whether w holds back a new database at now.
func (w Wait) Holds(now time.Time) bool { return now.Before(w.Until) }

// maxWaitFile bounds what is read of WaitFile.
const maxWaitFile = 4096

// WithNewStoreWait makes the first call that would create a database in a
// data directory with none (no database, no creation mark, no witness of a
// lost one) write WaitFile for d instead, and every call fail with
// reservation.ErrAwaiting until d has passed or checkpointd has looked
// (ipam.newStoreWait; 0: a new database is created at once, unless a
// WaitFile another process wrote holds it back). It returns s.
func (s *Store) WithNewStoreWait(d time.Duration) *Store {
	s.newStoreWait = d
	return s
}

func (s *Store) waitPath() string { return filepath.Join(s.dir, WaitFile) }

// NewStoreWait returns what WaitFile says; ok is false when there is none
// or it cannot be read (it then holds nothing back).
func (s *Store) NewStoreWait() (w Wait, ok bool) {
	f, err := os.Open(s.waitPath())
	if err != nil {
		return Wait{}, false
	}
	defer f.Close()
	data := make([]byte, maxWaitFile)
	n, _ := f.Read(data)
	if json.Unmarshal(data[:n], &w) != nil || w.Until.IsZero() {
		return Wait{}, false
	}
	return w, true
}

// HoldNew writes w to WaitFile, under the store's exclusive lock, when the
// data directory has no store (no database, no creation mark, no witness
// of a lost one); held is false, and nothing is written, when it has one.
// checkpointd's way to start, extend or end a wait.
func (s *Store) HoldNew(w Wait) (held bool, err error) {
	lk, err := s.lock(false)
	if err != nil {
		return false, err
	}
	defer lk.release()
	missing, err := s.present()
	if err != nil || !missing {
		return false, err
	}
	return true, s.writeWait(w)
}

// awaitNew runs before a call creates a new database (the caller holds the
// exclusive lock): a wait that holds fails the call; without one, and with
// WithNewStoreWait, one is started.
func (s *Store) awaitNew(now time.Time) error {
	w, ok := s.NewStoreWait()
	switch {
	case ok && w.Holds(now):
		return s.awaitingError(w, now)
	case ok || s.newStoreWait <= 0:
		return nil
	}
	w = Wait{Since: now, Until: now.Add(s.newStoreWait),
		By: "stickyip, at the first call on a data directory without a store (ipam.newStoreWait " + s.newStoreWait.String() + ")"}
	if err := s.writeWait(w); err != nil {
		return err
	}
	return s.awaitingError(w, now)
}

func (s *Store) awaitingError(w Wait, now time.Time) error {
	return fmt.Errorf("%w: %s has no store yet (a new node, or one re-installed under the same name) and checkpointd has not yet read this node's "+
		"placement entries, which may reserve addresses for its pods: no address is handed out until it has, or until %s (%s left; waiting since %s, set by %s)",
		reservation.ErrAwaiting, s.dir, w.Until.UTC().Format(time.RFC3339), w.Until.Sub(now).Round(time.Second),
		w.Since.UTC().Format(time.RFC3339), contract.Clip(w.By, 300))
}

// writeWait writes WaitFile atomically (a temporary file renamed into
// place, the directory synced).
func (s *Store) writeWait(w Wait) error {
	data, err := json.Marshal(w)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	tmp := s.waitPath() + ".new"
	err = writeSynced(tmp, append(data, '\n'))
	if err == nil {
		err = os.Rename(tmp, s.waitPath())
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %v", reservation.ErrIO, s.waitPath(), err)
	}
	return nil
}

// endWait removes WaitFile once a database is in place (a leftover is
// harmless: it is read only while there is no database).
func (s *Store) endWait() { _ = os.Remove(s.waitPath()) }
