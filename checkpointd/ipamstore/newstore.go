package ipamstore

import (
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// Missing reports whether the data directory has no database file (a new
// node, one re-installed, or a lost store: Damage tells the last apart).
func (s *Store) Missing() bool {
	_, err := os.Stat(s.store.Path())
	return errors.Is(err, fs.ErrNotExist)
}

// NewStoreWait returns the wait that holds back a new store
// (boltstore.WaitFile); ok is false when there is none.
func (s *Store) NewStoreWait() (boltstore.Wait, bool) { return s.store.NewStoreWait() }

// HoldNew starts, extends or ends the wait of a new store
// (boltstore.Store.HoldNew); held is false when a store exists.
func (s *Store) HoldNew(w boltstore.Wait) (bool, error) { return s.store.HoldNew(w) }

// MaxDuration is the longest reservation.maxDuration of the networks that
// keep their records in this store (ipam.StoreMaxDuration).
func (s *Store) MaxDuration() (time.Duration, error) {
	return ipam.StoreMaxDuration(s.confDir, s.store.Dir())
}
