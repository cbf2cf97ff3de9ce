package boltstore

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// ErrUsable is returned by Replace when the store it was asked to replace
// can be used after all (repaired or replaced meanwhile): it is left as it is.
var ErrUsable = errors.New("store is usable")

// AsidePrefix starts the name a replaced database is kept under, in the data
// directory: stickyip.db.damaged-<UTC time>, as in stickyip.db.damaged-20261127T101500Z.
const AsidePrefix = DBFile + ".damaged-"

// rebuildFile is where Replace builds the new database before it is renamed
// into place; a leftover of an interrupted rebuild is removed by the next.
const rebuildFile = DBFile + ".rebuild"

// Replaced says what Replace did.
type Replaced struct {
	// Why is what was wrong with the store (reservation.ErrCorrupt or
	// reservation.ErrLost, or nil for a data directory that never had one).
	Why error
	// Aside is the path the damaged database is kept under ("" when there
	// was no file).
	Aside string
}

// Replace puts a new database, written by build, in place of one no call
// can use: damaged (reservation.ErrCorrupt) or missing (reservation.ErrLost,
// or never created). It holds the store's exclusive lock throughout, so no
// other call runs between the check and the new database's arrival:
//
//  1. the store is checked again (Damage); a usable one is left as it is
//     (ErrUsable), and damage a rebuild does not repair (a newer schema,
//     I/O) is returned as it is;
//  2. the new database is written to stickyip.db.rebuild, build's changes
//     in one transaction, synced;
//  3. a damaged file is kept: a second name, stickyip.db.damaged-<UTC
//     time>, is linked to it (its bytes are never opened for writing,
//     moved or deleted; a file already kept under such a name is not
//     linked again);
//  4. the new database is renamed over stickyip.db and the directory
//     synced; the creation mark is written if missing, and a wait for a
//     new store (WaitFile) removed.
//
// A crash at any point leaves either the old state (the damaged file, or no
// file with the mark: every call fails until a rebuild ends) or the new
// database; never an empty store that calls would use.
func (s *Store) Replace(now time.Time, build func(open func(network string) (reservation.Txn, error)) error) (Replaced, error) {
	lk, err := s.lock(false)
	if err != nil {
		return Replaced{}, err
	}
	defer lk.release()
	why, exists, err := s.damageLocked()
	if err != nil {
		return Replaced{}, err
	}
	out := Replaced{Why: why}
	if err := s.buildNew(build); err != nil {
		return out, err
	}
	if exists {
		if out.Aside, err = s.keepAside(now); err != nil {
			return out, err
		}
	}
	if err := os.Rename(filepath.Join(s.dir, rebuildFile), s.Path()); err != nil {
		return out, fmt.Errorf("%w: putting the rebuilt store in place: %v", reservation.ErrIO, err)
	}
	if err := syncDir(s.dir); err != nil {
		return out, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	if err := s.mark(now); err != nil {
		return out, err
	}
	s.endWait() // a new store held back for checkpointd: this is it
	return out, nil
}

// Damage reports why no call can use the store, when a rebuild repairs
// it: reservation.ErrCorrupt (it does not open, its schema is missing or
// 0, a record does not decode) or reservation.ErrLost. It returns nil for
// a usable store or a data directory that never had one, and other errors
// (a newer schema, I/O, a lock held past the timeout) as they are.
func (s *Store) Damage() error {
	lk, err := s.lock(true)
	if err != nil {
		return err
	}
	defer lk.release()
	why, _, err := s.damageLocked()
	if errors.Is(err, ErrUsable) {
		return nil
	}
	return cmp.Or(err, why)
}

// damageLocked is Damage under the caller's lock; the error is what
// cannot be repaired (or ErrUsable), why what can; exists says whether
// there is a database file.
func (s *Store) damageLocked() (why error, exists bool, err error) {
	missing, err := s.present()
	switch {
	case errors.Is(err, reservation.ErrLost):
		return err, false, nil
	case errors.Is(err, reservation.ErrCorrupt):
		return err, true, nil
	case err != nil:
		return nil, false, err
	case missing:
		return nil, false, nil
	}
	err = s.open(true, false, 0, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			if err := checkSchema(tx, true); err != nil {
				return err
			}
			return readAll(tx)
		})
	})
	switch {
	case err == nil:
		return nil, true, ErrUsable
	case errors.Is(err, reservation.ErrCorrupt):
		return err, true, nil
	}
	return nil, true, err
}

// readAll reads what any call may read: the roots, then every record of
// every network, decoded. (bbolt's own page check is `stickyip check`'s:
// a free-list problem does not stop a call.)
func readAll(tx *bolt.Tx) error {
	if err := readRoots(tx); err != nil {
		return err
	}
	return tx.Bucket(bucketNetworks).ForEachBucket(func(name []byte) error {
		t, err := openNetwork(tx, string(name), false)
		if err != nil {
			return err
		}
		return t.ips.ForEach(func(k, v []byte) error {
			if _, err := decode(k, v); err != nil {
				return fmt.Errorf("%w: %s: network %q: %v", reservation.ErrCorrupt, tx.DB().Path(), name, err)
			}
			return nil
		})
	})
}

// buildNew writes a new database to rebuildFile: the current schema, then
// build's changes in one transaction.
func (s *Store) buildNew(build func(open func(network string) (reservation.Txn, error)) error) error {
	tmp := filepath.Join(s.dir, rebuildFile)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: removing a leftover %s: %v", reservation.ErrIO, tmp, err)
	}
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("%w: creating %s: %v", reservation.ErrIO, tmp, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := initBuckets(tx); err != nil {
			return err
		}
		return build(func(network string) (reservation.Txn, error) { return openNetwork(tx, network, true) })
	})
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w: closing %s: %v", reservation.ErrIO, tmp, cerr)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return classifyTxError(err)
	}
	return nil
}

// keepAside links a second name, AsidePrefix and the UTC time, to the
// damaged database, unless one already names that file (an earlier
// rebuild was interrupted after linking it). It returns that name.
func (s *Store) keepAside(now time.Time) (string, error) {
	fi, err := os.Stat(s.Path())
	if err != nil {
		return "", fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	kept, _ := filepath.Glob(filepath.Join(s.dir, AsidePrefix+"*"))
	for _, k := range kept {
		if ki, err := os.Stat(k); err == nil && os.SameFile(fi, ki) {
			return k, nil
		}
	}
	base := filepath.Join(s.dir, AsidePrefix+now.UTC().Format("20060102T150405Z"))
	aside := base
	for i := 2; ; i++ {
		err := os.Link(s.Path(), aside)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("%w: keeping the damaged store as %s: %v", reservation.ErrIO, aside, err)
		}
		aside = base + "." + strconv.Itoa(i)
	}
	if err := syncDir(s.dir); err != nil {
		return "", fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	return aside, nil
}
