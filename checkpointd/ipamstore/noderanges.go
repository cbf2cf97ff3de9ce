package ipamstore

import (
	"net/netip"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// SetNodeRanges records the Node's pod CIDRs in every network of the store
// that has a config (ipam.Engine.SetNodeRanges): the ranges it no longer has
// are retired, and what they held is dropped. It returns the ranges as
// recorded, the records dropped, and whether anything changed
// (SetNodeRangesIn on the store as read now).
func (s *Store) SetNodeRanges(current []netip.Prefix) (ipam.NodeRanges, []reservation.Entry, bool, error) {
	v, err := s.Observe()
	if err != nil {
		return ipam.NodeRanges{}, nil, false, err
	}
	return s.SetNodeRangesIn(v, current)
}

// NodeRanges returns the node's pod ranges as recorded in the store (the
// first network that has them; every network gets the same).
func (s *Store) NodeRanges() (ipam.NodeRanges, error) {
	v, err := s.Observe()
	if err != nil {
		return ipam.NodeRanges{}, err
	}
	return v.Ranges, nil
}

// NodeHolds returns the test of whether an entry's address is one the node
// holds now, for this moment's configs and node ranges
// (ipam.Engine.NodeHolds). A network without a usable config holds
// nothing (no record is better than a wrong one): the error then names it,
// along with a test that still answers for the other networks (View.Holds).
func (s *Store) NodeHolds() (func(reservation.Entry) bool, error) {
	v, err := s.Observe()
	if err != nil {
		return nil, err
	}
	return v.Holds()
}
