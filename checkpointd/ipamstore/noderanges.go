package ipamstore

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// SetNodeRanges records the Node's pod CIDRs in every network of the store
// that has a config (ipam.Engine.SetNodeRanges): the ranges it no longer has
// are retired, and what they held is dropped. It returns the ranges as
// recorded, the records dropped, and whether anything changed.
func (s *Store) SetNodeRanges(current []netip.Prefix) (ipam.NodeRanges, []reservation.Entry, bool, error) {
	nets, err := s.store.Networks()
	if err != nil {
		return ipam.NodeRanges{}, nil, false, err
	}
	var (
		out     ipam.NodeRanges
		dropped []reservation.Entry
		changed bool
		errs    []error
	)
	for _, network := range nets {
		eng, err := ipam.NetworkEngine(s.confDir, network, s.store.Dir(), s.env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var recorded bool
		err = s.store.Update(network, func(tx reservation.Txn) error {
			n, d, err := eng.SetNodeRanges(tx, current)
			out = n
			if err == nil {
				recorded = true
				for _, r := range d {
					dropped = append(dropped, reservation.Entry{Network: network, Record: r})
				}
			}
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", network, err))
		}
		changed = changed || recorded
	}
	return out, dropped, changed, errors.Join(errs...)
}

// NodeRanges returns the node's pod ranges as recorded in the store (the
// first network that has them; every network gets the same).
func (s *Store) NodeRanges() (ipam.NodeRanges, error) {
	nets, err := s.store.Networks()
	if err != nil {
		return ipam.NodeRanges{}, err
	}
	for _, network := range nets {
		var n ipam.NodeRanges
		err := s.store.View(network, func(tx reservation.Txn) (err error) {
			n, err = ipam.ReadNodeRanges(tx)
			return err
		})
		if err != nil || len(n.Current) > 0 {
			return n, err
		}
	}
	return ipam.NodeRanges{}, nil
}

// NodeHolds returns the test of whether an entry's address is one the node
// holds now, for this moment's configs and node ranges
// (ipam.Engine.NodeHolds). A network without a usable config holds
// nothing (no record is better than a wrong one): the error then names it,
// along with a test that still answers for the other networks.
func (s *Store) NodeHolds() (func(reservation.Entry) bool, error) {
	n, err := s.NodeRanges()
	if err != nil {
		return nil, err
	}
	nets, err := s.store.Networks()
	if err != nil {
		return nil, err
	}
	engines := map[string]*ipam.Engine{}
	var problems []error
	for _, network := range nets {
		eng, err := ipam.NetworkEngine(s.confDir, network, s.store.Dir(), s.env)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		engines[network] = eng
	}
	return func(e reservation.Entry) bool {
		eng := engines[e.Network]
		return eng != nil && eng.NodeHolds(n, e.IP)
	}, errors.Join(problems...)
}
