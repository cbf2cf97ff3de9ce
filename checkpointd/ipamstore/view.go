package ipamstore

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// View is what one pass of checkpointd reads of the node's IPAM side: the
// CNI config directory and the store, each read once (Store.Observe), and
// every answer the pass needs from them: the records, each network's
// totals, the node's pod ranges, the networks the configuration no longer
// keeps here, the engine of each network.
type View struct {
	// At is when it was read.
	At time.Time
	// Networks are the store's networks, in name order.
	Networks []string
	// Entries are the records of every network.
	Entries []reservation.Entry
	// Pools are the totals of each network the configuration keeps in this
	// store, as `stickyip status` counts them (nil without a config dir).
	Pools map[string]ipam.PoolTotals
	// Unconfigured are the networks of the store that hold sticky records
	// while the configuration no longer keeps their records here
	// (ipam.UnconfiguredNetworks; nil without a config dir).
	Unconfigured []ipam.UnconfiguredNetwork
	// ConfErr is why the config dir could not be read (then Pools and
	// Unconfigured are unknown, and no network has an engine).
	ConfErr error
	// Ranges are the node's pod ranges as recorded.
	Ranges ipam.NodeRanges
	// Waiting are the rebuilt networks that wait for the placement index's
	// reservations, until when (Store.Waiting's answer).
	Waiting map[string]time.Time
	// Conf is the CNI config directory as read (nil: none given, or
	// ConfErr).
	Conf *ipam.Conf

	dataDir string
	env     ipam.Env
}

// Observe reads the CNI config directory and the store once each (one
// transaction over every network) into a View.
func (s *Store) Observe() (*View, error) {
	v := &View{At: s.now(), dataDir: s.store.Dir(), env: s.env}
	if s.confDir != "" {
		c, err := ipam.ReadConf(s.confDir)
		if err != nil {
			v.ConfErr = fmt.Errorf("reading the CNI config dir: %w", err)
		} else {
			v.Conf = c
			v.Pools = map[string]ipam.PoolTotals{}
		}
	}
	err := s.store.ViewAll(func(network string, tx reservation.Txn) error {
		v.Networks = append(v.Networks, network)
		var recs []*reservation.Record
		if err := tx.ForEach(func(r *reservation.Record) error {
			recs = append(recs, r)
			v.Entries = append(v.Entries, reservation.Entry{Network: network, Record: r})
			return nil
		}); err != nil {
			return err
		}
		until, err := ipam.RebuildWait(tx, v.At)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			if v.Waiting == nil {
				v.Waiting = map[string]time.Time{}
			}
			v.Waiting[network] = until
		}
		if len(v.Ranges.Current) == 0 {
			n, err := ipam.ReadNodeRanges(tx)
			if err != nil {
				return err
			}
			v.Ranges = n
		}
		if sc, ok := v.configured(network); ok {
			sets, outside := ipam.NewEngine(sc.Config, ipam.Env{}).SummaryOf(recs, v.At)
			v.Pools[network] = ipam.Totals(sets, outside)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A configured network without records yet counts as empty.
	if v.Conf != nil {
		for network, sc := range v.Conf.Stickyip {
			if _, seen := v.Pools[network]; !seen && filepath.Clean(sc.DataDir) == filepath.Clean(v.dataDir) {
				sets, outside := ipam.NewEngine(sc.Config, ipam.Env{}).SummaryOf(nil, v.At)
				v.Pools[network] = ipam.Totals(sets, outside)
			}
		}
		v.Unconfigured = v.Conf.Unconfigured(v.dataDir, v.Entries, v.At)
	}
	return v, nil
}

// configured returns network's stickyip config when it keeps its records in
// this store.
func (v *View) configured(network string) (ipam.StickyipNetwork, bool) {
	if v.Conf == nil {
		return ipam.StickyipNetwork{}, false
	}
	sc, ok := v.Conf.Stickyip[network]
	return sc, ok && filepath.Clean(sc.DataDir) == filepath.Clean(v.dataDir)
}

// Engine returns network's engine, built from its config as read
// (ipam.ErrNoNetworkConfig without one that keeps its records here).
func (v *View) Engine(network string) (*ipam.Engine, error) {
	if v.Conf == nil {
		return nil, fmt.Errorf("%w: network %s: %v", ipam.ErrNoNetworkConfig, network, cmp.Or(v.ConfErr, errors.New("no CNI config dir")))
	}
	return v.Conf.Engine(network, v.dataDir, v.env)
}

// Holds returns the test of whether an entry's address is one the node
// holds now (NodeHolds' answer, from what was read).
func (v *View) Holds() (func(reservation.Entry) bool, error) {
	engines := map[string]*ipam.Engine{}
	var problems []error
	for _, e := range v.Entries {
		if _, done := engines[e.Network]; done {
			continue
		}
		eng, err := v.Engine(e.Network)
		if err != nil {
			problems = append(problems, err)
		}
		engines[e.Network] = eng
	}
	n := v.Ranges
	return func(e reservation.Entry) bool {
		eng := engines[e.Network]
		return eng != nil && eng.NodeHolds(n, e.IP)
	}, errors.Join(problems...)
}

// FlannelNetworks returns the networks whose flannel plugin reads
// subnetFile (package function FlannelNetworks' answer, from what was read).
func (v *View) FlannelNetworks(subnetFile string) []string {
	if v.Conf == nil {
		return nil
	}
	var out []string
	for _, n := range v.Conf.Networks {
		for _, p := range n.Plugins {
			if p.Type == "flannel" && filepath.Clean(cmp.Or(p.SubnetFile, contract.DefaultFlannelSubnetFile)) == filepath.Clean(subnetFile) {
				out = append(out, n.Name)
				break
			}
		}
	}
	return out
}

// ReleaseIn is ReleaseContainer with the network's engine as v read it.
func (s *Store) ReleaseIn(v *View, network, containerID, ifname string) (released bool, err error) {
	eng, err := v.Engine(network)
	if err != nil {
		return false, err
	}
	err = s.store.Update(network, func(tx reservation.Txn) error {
		n, err := eng.ReleaseIfGone(tx, containerID, ifname)
		released = n > 0
		return err
	})
	return released, err
}

// SetNodeRangesIn is SetNodeRanges with the networks and engines as v read
// them.
func (s *Store) SetNodeRangesIn(v *View, current []netip.Prefix) (ipam.NodeRanges, []reservation.Entry, bool, error) {
	var (
		out     ipam.NodeRanges
		dropped []reservation.Entry
		changed bool
		errs    []error
	)
	for _, network := range v.Networks {
		eng, err := v.Engine(network)
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
