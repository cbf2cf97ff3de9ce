// Package ipamstore adapts the stickyip IPAM store (<dataDir>/stickyip.db,
// package reservation/boltstore) to checkpointd's reconcile.IPAM. Every call
// opens the store, runs one transaction and closes it, queueing on the same
// lock as the CNI plugin, so checkpointd never holds the database between
// calls.
package ipamstore

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// Store is the IPAM store of one data directory.
type Store struct {
	store   *boltstore.Store
	env     ipam.Env
	confDir string
}

// WithCNIConfDir names the CNI config dir the store's networks are configured
// in: Pools counts them, ReleaseContainer applies their rules. Without it the
// store does not know its networks (Pools is empty, nothing is released).
func (s *Store) WithCNIConfDir(dir string) *Store {
	s.confDir = dir
	return s
}

// WithCNIResultsDir names the runtime's CNI result cache: a data directory
// with neither a database nor a creation mark, whose store a sandbox there
// got its address from, is a lost store (ipam.CacheWitness), rebuilt as
// one, not a new node's.
func (s *Store) WithCNIResultsDir(dir string) *Store {
	s.store.WithLostWitness(ipam.CacheWitness(dir, s.store.Dir()))
	return s
}

// Pools returns the totals of every stickyip network configured in the CNI
// config dir that keeps its records in this store, counted by the engine
// exactly as `stickyip status` counts them.
func (s *Store) Pools() (map[string]ipam.PoolTotals, error) {
	if s.confDir == "" {
		return nil, nil
	}
	confs, _, err := ipam.StickyipNetworks(s.confDir)
	if err != nil {
		return nil, err
	}
	out := map[string]ipam.PoolTotals{}
	now := time.Now()
	if s.env.Now != nil {
		now = s.env.Now()
	}
	for network, c := range confs {
		if filepath.Clean(c.DataDir) != filepath.Clean(s.store.Dir()) {
			continue // another store's network
		}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		err := s.store.View(network, func(tx reservation.Txn) error {
			sets, outside, err := e.Summary(tx, now)
			out[network] = ipam.Totals(sets, outside)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("network %s: %w", network, err)
		}
	}
	return out, nil
}

// New returns the store in dataDir. lockTimeout bounds the wait for the
// plugin's lock (0: the store's default).
func New(dataDir string, lockTimeout time.Duration, log *slog.Logger) *Store {
	return &Store{store: boltstore.New(dataDir, lockTimeout), env: ipam.HostEnv(log)}
}

// NewWithEnv is New with a given engine environment (tests).
func NewWithEnv(dataDir string, lockTimeout time.Duration, env ipam.Env) *Store {
	return &Store{store: boltstore.New(dataDir, lockTimeout), env: env}
}

// Entries lists every record of every network.
func (s *Store) Entries() ([]reservation.Entry, error) {
	nets, err := s.store.Networks()
	if err != nil {
		return nil, err
	}
	var out []reservation.Entry
	for _, n := range nets {
		err := s.store.View(n, func(tx reservation.Txn) error {
			return tx.ForEach(func(r *reservation.Record) error {
				out = append(out, reservation.Entry{Network: n, Record: r})
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("network %s: %w", n, err)
		}
	}
	return out, nil
}

// ReleaseContainer handles the allocations of (containerID, ifname), whose
// sandbox the runtime does not list, as a CNI DEL if the engine finds the
// sandbox gone (previous boot, network namespace missing): recorded
// reservation durations become reservations, the rest cools down by the
// network's reuse delay. A sandbox in doubt may belong to another runtime or
// to cnitool and keeps its addresses; released says whether any were
// released. The engine is built from the network's config in the CNI config
// dir; without one nothing is changed (ipam.ErrNoNetworkConfig).
func (s *Store) ReleaseContainer(network, containerID, ifname string) (released bool, err error) {
	eng, err := ipam.NetworkEngine(s.confDir, network, s.store.Dir(), s.env)
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

// Unconfigured returns the networks of this store that hold sticky records
// while the CNI config dir no longer keeps their records here (the
// conflist switched back to another IPAM, or gone); nil without a CNI
// config dir.
func (s *Store) Unconfigured() ([]ipam.UnconfiguredNetwork, error) {
	if s.confDir == "" {
		return nil, nil
	}
	entries, err := s.Entries()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if s.env.Now != nil {
		now = s.env.Now()
	}
	return ipam.UnconfiguredNetworks(s.confDir, s.store.Dir(), entries, now)
}
