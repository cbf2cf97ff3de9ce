package ipamstore

import (
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// Retain applies checkpointd's retention changes to the records of
// network, in one transaction (none when nothing changes: no sync), and
// returns how many records changed. It needs no network config
// (ipam.Retain).
func (s *Store) Retain(network string, changes []ipam.RetentionChange) (int, error) {
	var n int
	err := s.store.Update(network, func(tx reservation.Txn) (err error) {
		n, err = ipam.Retain(tx, changes, s.env.Log)
		return err
	})
	return n, err
}
