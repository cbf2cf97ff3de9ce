// Package ipamstore adapts the stickyip IPAM store (<dataDir>/stickyip.db,
// package reservation/boltstore) to checkpointd's reconcile.IPAM. Every call
// opens the store, runs one transaction and closes it, queueing on the same
// lock as the CNI plugin, so checkpointd never holds the database between
// calls.
package ipamstore

import (
	"fmt"
	"log/slog"
	"sync"
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
	mu      sync.Mutex // guards last
	last    *read      // what the last Observe read (view.go)
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
// exactly as `stickyip status` counts them (View.Pools).
func (s *Store) Pools() (map[string]ipam.PoolTotals, error) {
	v, err := s.Observe()
	if err != nil {
		return nil, err
	}
	return v.Pools, v.ConfErr
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

// ConfDir returns the CNI config directory ("" when none is given).
func (s *Store) ConfDir() string { return s.confDir }

// Dir returns the data directory.
func (s *Store) Dir() string { return s.store.Dir() }

// Uses returns how many times the store was opened (boltstore.Store.Uses).
func (s *Store) Uses() int64 { return s.store.Uses() }

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
// dir; without one nothing is changed (ipam.ErrNoNetworkConfig). A daemon's
// pass, which has read the store already, calls ReleaseIn.
func (s *Store) ReleaseContainer(network, containerID, ifname string) (released bool, err error) {
	v, err := s.Observe()
	if err != nil {
		return false, err
	}
	return s.ReleaseIn(v, network, containerID, ifname)
}

// Unconfigured returns the networks of this store that hold sticky records
// while the CNI config dir no longer keeps their records here (the
// conflist switched back to another IPAM, or gone); nil without a CNI
// config dir (View.Unconfigured).
func (s *Store) Unconfigured() ([]ipam.UnconfiguredNetwork, error) {
	v, err := s.Observe()
	if err != nil {
		return nil, err
	}
	return v.Unconfigured, v.ConfErr
}
