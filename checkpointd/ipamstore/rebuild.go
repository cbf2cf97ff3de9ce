package ipamstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// NetworkRebuild is what a rebuild puts in one network (ipam.Engine.Rebuild).
type NetworkRebuild struct {
	Attachments []ipam.Attachment
	Restored    []ipam.Restored
	// WaitUntil, when set, holds back new addresses until the placement
	// index's reservations are restored, or until then.
	WaitUntil time.Time
}

// Damage reports why no CNI call can use the store when a rebuild repairs
// it (reservation.ErrCorrupt, reservation.ErrLost), else nil or the error
// that stops every call for another reason (boltstore.Store.Damage).
func (s *Store) Damage() error { return s.store.Damage() }

// Health is the plugin's STATUS check of the store (boltstore.Store.Health).
func (s *Store) Health() error { return s.store.Health() }

// Networks returns the config of every stickyip network of the CNI config
// dir that keeps its records in this store. A config that cannot be read,
// or none at all, is an error: a rebuild without a network's ranges and
// rules would lose what it holds.
func (s *Store) Networks() (map[string]*ipam.Config, error) {
	if s.confDir == "" {
		return nil, errors.New("no CNI config dir (--cni-conf-dir): the networks' ranges and rules are unknown")
	}
	confs, problems, err := ipam.StickyipNetworks(s.confDir)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("CNI configs that cannot be read: %s", strings.Join(problems, "; "))
	}
	out := map[string]*ipam.Config{}
	for name, c := range confs {
		if filepath.Clean(c.DataDir) == filepath.Clean(s.store.Dir()) {
			out[name] = c.Config
		}
	}
	if len(out) == 0 {
		// Never an empty store for a network checkpointd cannot see: the
		// plugin would hand out its running pods' addresses.
		return nil, fmt.Errorf("no stickyip network of %s keeps its records in %s (--cni-conf-dir, --data-dir)", s.confDir, s.store.Dir())
	}
	return out, nil
}

// Rebuild puts a new database in place of the damaged or lost one
// (boltstore.Store.Replace: the damaged file is kept), each network of
// plan written by its engine, built from confs, in one transaction. It
// returns what Replace did and each network's report.
func (s *Store) Rebuild(confs map[string]*ipam.Config, plan map[string]NetworkRebuild) (boltstore.Replaced, map[string]ipam.RebuildReport, error) {
	reports := map[string]ipam.RebuildReport{}
	now := s.now()
	replaced, err := s.store.Replace(now, func(open func(string) (reservation.Txn, error)) error {
		for network, p := range plan {
			c, ok := confs[network]
			if !ok {
				return fmt.Errorf("%w: network %s", ipam.ErrNoNetworkConfig, network)
			}
			tx, err := open(network)
			if err != nil {
				return err
			}
			rep, err := ipam.NewEngine(c, s.env).Rebuild(tx, p.Attachments, p.Restored, p.WaitUntil)
			if err != nil {
				return fmt.Errorf("network %s: %w", network, err)
			}
			reports[network] = rep
		}
		return nil
	})
	return replaced, reports, err
}

// Waiting returns the networks of a rebuilt store that wait for the
// placement index's reservations, with until when (ipam.RebuildWait).
func (s *Store) Waiting() (map[string]time.Time, error) {
	out := map[string]time.Time{}
	now := s.now()
	err := s.store.ViewAll(func(n string, tx reservation.Txn) error {
		until, err := ipam.RebuildWait(tx, now)
		if !until.IsZero() {
			out[n] = until
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RestoreReservations puts the placement index's reservations back into
// the networks that wait for them and ends their wait
// (ipam.Engine.RestoreReservations), each by its own config's engine.
func (s *Store) RestoreReservations(restored map[string][]ipam.Restored, networks []string) (map[string]ipam.RebuildReport, error) {
	out := map[string]ipam.RebuildReport{}
	var errs []error
	for _, n := range networks {
		eng, err := ipam.NetworkEngine(s.confDir, n, s.store.Dir(), s.env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = s.store.Update(n, func(tx reservation.Txn) error {
			rep, err := eng.RestoreReservations(tx, restored[n])
			out[n] = rep
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("network %s: %w", n, err))
		}
	}
	return out, errors.Join(errs...)
}

func (s *Store) now() time.Time {
	if s.env.Now != nil {
		return s.env.Now()
	}
	return time.Now()
}

// Path is the database file's path.
func (s *Store) Path() string { return s.store.Path() }
