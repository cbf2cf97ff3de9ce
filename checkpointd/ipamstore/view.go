package ipamstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
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
// transaction over every network) into a View. A store and a directory
// unchanged since the last Observe (the store's version: its meta pages
// and journal; each config file's and flannel lease's size, times and
// inode) are not read again: the View is made anew from what was read then,
// at the present time (what has expired since counts as such).
func (s *Store) Observe() (*View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	version, verr := s.store.Version()
	stamp, serr := s.confStamp()
	if l := s.last; l != nil && verr == nil && serr == nil && l.version == version && l.stamp == stamp {
		return l.view(now), nil
	}
	s.last = nil
	r := &read{dataDir: s.store.Dir(), env: s.env, records: map[string][]*reservation.Record{}, waits: map[string]time.Time{}}
	if s.confDir != "" {
		c, err := ipam.ReadConf(s.confDir)
		if err != nil {
			r.confErr = fmt.Errorf("reading the CNI config dir: %w", err)
		} else {
			r.conf = c
		}
	}
	err := s.store.ViewAll(func(network string, tx reservation.Txn) error {
		r.networks = append(r.networks, network)
		var recs []*reservation.Record
		if err := tx.ForEach(func(rec *reservation.Record) error {
			recs = append(recs, rec)
			r.entries = append(r.entries, reservation.Entry{Network: network, Record: rec})
			return nil
		}); err != nil {
			return err
		}
		r.records[network] = recs
		until, err := ipam.RebuildWait(tx, now)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			r.waits[network] = until
		}
		if len(r.ranges.Current) == 0 {
			n, err := ipam.ReadNodeRanges(tx)
			if err != nil {
				return err
			}
			r.ranges = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if verr == nil && serr == nil && version != 0 {
		r.version, r.stamp = version, stamp
		s.last = r
	}
	return r.view(now), nil
}

// read is what Observe read of the store and the config directory, kept
// for the next Observe while neither changes.
type read struct {
	version, stamp uint64
	dataDir        string
	env            ipam.Env
	conf           *ipam.Conf
	confErr        error
	networks       []string
	entries        []reservation.Entry
	records        map[string][]*reservation.Record // by network
	ranges         ipam.NodeRanges
	waits          map[string]time.Time
	engines        map[string]*ipam.Engine // the configured networks', for their totals
}

// view makes the View of what was read, at now.
func (r *read) view(now time.Time) *View {
	v := &View{At: now, Networks: r.networks, Entries: r.entries, Ranges: r.ranges, Conf: r.conf, ConfErr: r.confErr,
		dataDir: r.dataDir, env: r.env}
	for n, until := range r.waits {
		if now.Before(until) {
			if v.Waiting == nil {
				v.Waiting = map[string]time.Time{}
			}
			v.Waiting[n] = until
		}
	}
	if r.conf == nil {
		return v
	}
	if r.engines == nil {
		r.engines = map[string]*ipam.Engine{}
		for network, sc := range r.conf.Stickyip {
			if filepath.Clean(sc.DataDir) == filepath.Clean(r.dataDir) {
				r.engines[network] = ipam.NewEngine(sc.Config, ipam.Env{})
			}
		}
	}
	v.Pools = map[string]ipam.PoolTotals{}
	for network, e := range r.engines {
		// A configured network without records yet counts as empty.
		sets, outside := e.SummaryOf(r.records[network], now)
		v.Pools[network] = ipam.Totals(sets, outside)
	}
	v.Unconfigured = r.conf.Unconfigured(r.dataDir, r.entries, now)
	return v
}

// confStamp returns a value that changes with the config directory's
// files (names, sizes, times, inodes) and with the flannel leases its
// flannel networks read (0 without a config dir).
func (s *Store) confStamp() (uint64, error) {
	if s.confDir == "" {
		return 0, nil
	}
	var h maphash.Hash
	h.SetSeed(stampSeed)
	ents, err := os.ReadDir(s.confDir)
	if err != nil {
		return 0, err
	}
	stat := func(fi os.FileInfo) {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return
		}
		_ = binary.Write(&h, binary.LittleEndian, [6]int64{int64(st.Ino), st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec})
	}
	for _, e := range ents {
		_, _ = h.WriteString(e.Name())
		if fi, err := os.Stat(filepath.Join(s.confDir, e.Name())); err == nil { // a symlink's target
			stat(fi)
		}
	}
	if l := s.last; l != nil && l.conf != nil {
		for _, n := range l.conf.Networks {
			for _, p := range n.Plugins {
				if p.Type == "flannel" {
					file := cmp.Or(p.SubnetFile, contract.DefaultFlannelSubnetFile)
					_, _ = h.WriteString(file)
					if fi, err := os.Stat(file); err == nil {
						stat(fi)
					}
				}
			}
		}
	}
	return h.Sum64(), nil
}

// stampSeed seeds confStamp's hashes (a process compares only its own).
var stampSeed = maphash.MakeSeed()

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
