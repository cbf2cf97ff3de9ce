package boltstore

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// UpdateJournaled runs fn as Update does, with the journal's changes made
// first, but instead of committing it adds fn's changes to the journal
// (JournalFile) and rolls the transaction back: nothing is synced, the
// database is not written. Every later call sees the changes (Update and
// the readers apply the journal first), a killed process cannot lose them
// (they are in the page cache), and the next Update commits them with its
// own, synced. A power loss or kernel crash before that may lose them; the
// database is never damaged by it.
//
// It commits, synced, as Update, when the journal is full
// (maxJournalEntries, or no room in the file), when fn changes more than
// maxJournalOps records, or when the database must first be created or
// migrated.
func (s *Store) UpdateJournaled(network string, fn func(reservation.Txn) error) error {
	err := s.withDB(false, func(db *bolt.DB) error {
		tx, err := db.Begin(true)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		v, _ := storedSchema(tx)
		current := v == SchemaVersion
		if err := checkSchema(tx, true); err != nil {
			return err
		}
		j, err := s.pending(tx)
		defer j.close()
		if err != nil {
			return err
		}
		t, err := openNetwork(tx, network, true)
		if err != nil {
			return err
		}
		rec := &recorder{Txn: t, net: network}
		if err := fn(rec); err != nil {
			return err
		}
		if len(rec.ops) == 0 {
			return nil
		}
		if current && len(j.entries) < maxJournalEntries && len(rec.ops) <= maxJournalOps {
			if added, err := j.add(rec.ops); err != nil || added {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		_ = j.clear() // as in Update
		return nil
	})
	if errors.Is(err, reservation.ErrNoChange) {
		return nil
	}
	return err
}

// viewJournaled runs fn, when the journal holds entries, on a write
// transaction that has made their changes and is rolled back after fn
// (under the exclusive lock: nothing is written). done is false when there
// is no journal, no database, or the store cannot be opened for writing (a
// read-only directory): the caller then reads the database as stored.
func (s *Store) viewJournaled(fn func(tx *bolt.Tx) error) (err error, done bool) {
	if !journalHead(s.dir) {
		return nil, false
	}
	lk, err := s.lock(false)
	if err != nil {
		return nil, false
	}
	defer lk.release()
	if missing, err := s.present(); err != nil || missing {
		return nil, false
	}
	ran := false
	err = s.open(false, false, 0, func(db *bolt.DB) error {
		tx, err := db.Begin(true)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if err := checkSchema(tx, true); err != nil {
			return err
		}
		j, err := s.pending(tx)
		j.close()
		if err != nil {
			return err
		}
		ran = true
		return fn(tx)
	})
	if !ran && errors.Is(err, reservation.ErrIO) {
		return nil, false
	}
	return err, true
}
