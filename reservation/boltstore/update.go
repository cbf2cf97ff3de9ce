package boltstore

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// Update runs fn in one read-write transaction on network's records and commits
// it, synced to disk, when fn returns nil, with the journal's changes
// (JournalFile) made first. When fn returns reservation.ErrNoChange the
// transaction is rolled back and Update returns nil. When fn returns a
// *reservation.NeedRoom, the transaction is rolled back and fn runs again,
// once, in a transaction with that room (Txn.HasRoom). The database is
// created when missing.
func (s *Store) Update(network string, fn func(reservation.Txn) error) error {
	room := 0
	for {
		err := s.update(network, room, fn)
		var more *reservation.NeedRoom
		if errors.As(err, &more) && room == 0 && more.Bytes > 0 {
			room = more.Bytes
			continue
		}
		if errors.Is(err, reservation.ErrNoChange) {
			return nil
		}
		return err
	}
}

// update is one Update with a file mapping of room bytes.
func (s *Store) update(network string, room int, fn func(reservation.Txn) error) error {
	return s.withRoom(false, room, func(db *bolt.DB) error {
		var j *journal
		err := db.Update(func(tx *bolt.Tx) error {
			if err := checkSchema(tx, true); err != nil {
				return err
			}
			var err error
			if j, err = s.pending(tx); err != nil {
				return err
			}
			t, err := openNetwork(tx, network, true)
			if err != nil {
				return err
			}
			t.room = room
			return fn(t)
		})
		if err == nil {
			// The commit holds the journal's changes and changed its base: a
			// journal not voided (this failing, a crash) is ignored, and
			// overwritten by the next entry.
			_ = j.clear()
		}
		j.close()
		return err
	})
}
