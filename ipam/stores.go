package ipam

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// NetworkStore is where a network configured with stickyip keeps its
// records, as its CNI config says: ipam.dataDir (default
// contract.DefaultDataDir) and the host-local directory it imports from
// (ipam.hostLocalDataDir, default contract.DefaultHostLocalDataDir; "" when
// the import is off).
type NetworkStore struct {
	Network          string
	DataDir          string
	HostLocalDataDir string
	// File is the CNI config file the network comes from.
	File string
}

// NetworkStores returns, in network name order, the data directory of
// every network in the CNI config dir dir whose IPAM is stickyip, read from
// the config alone: unlike StickyipNetworks it needs no ranges, so a
// flannel network is found before flanneld has written its subnet file
// (at boot, or with flanneld down). Files that do not parse are named in
// problems, as by ReadConfDir, and so are stickyip blocks whose directories
// are not absolute paths.
func NetworkStores(dir string) ([]NetworkStore, []string, error) {
	c, err := ReadConf(dir)
	if err != nil {
		return nil, nil, err
	}
	stores, problems := c.Stores()
	return stores, problems, nil
}

// Store returns where n keeps its records when its IPAM is stickyip (the
// first plugin entry with a stickyip IPAM block); ok is false otherwise.
func (n ConfNetwork) Store() (NetworkStore, bool, error) {
	for _, p := range n.Plugins {
		if s, ok, err := pluginStore(p); err != nil || ok {
			s.Network, s.File = n.Name, n.File
			return s, ok, err
		}
	}
	return NetworkStore{}, false, nil
}

// pluginStore reads the directories of a plugin entry's stickyip IPAM
// block; ok is false for another IPAM or none.
func pluginStore(p ConfPlugin) (NetworkStore, bool, error) {
	if len(p.IPAM) == 0 {
		return NetworkStore{}, false, nil
	}
	var block struct {
		Type             string  `json:"type"`
		DataDir          string  `json:"dataDir"`
		HostLocalDataDir *string `json:"hostLocalDataDir"`
	}
	if err := json.Unmarshal(p.IPAM, &block); err != nil {
		return NetworkStore{}, false, fmt.Errorf("ipam: %w", err)
	}
	if block.Type != contract.PluginType {
		return NetworkStore{}, false, nil
	}
	s := NetworkStore{DataDir: contract.DefaultDataDir, HostLocalDataDir: contract.DefaultHostLocalDataDir}
	if block.DataDir != "" {
		s.DataDir = block.DataDir
	}
	if block.HostLocalDataDir != nil {
		s.HostLocalDataDir = *block.HostLocalDataDir
	}
	for _, d := range []struct{ key, dir string }{{"ipam.dataDir", s.DataDir}, {"ipam.hostLocalDataDir", s.HostLocalDataDir}} {
		if d.dir != "" && !filepath.IsAbs(d.dir) {
			return NetworkStore{}, false, fmt.Errorf("%s %q is not an absolute path", d.key, d.dir)
		}
	}
	s.DataDir = filepath.Clean(s.DataDir)
	return s, true, nil
}

// StoreMaxDuration returns the longest reservation.maxDuration of the
// networks in the CNI config dir dir that keep their records in dataDir,
// read from their config alone (no ranges needed: a flannel network's is
// known before flanneld has written its subnet file); no reservation in
// that store can outlive it. Without such a network it is the default.
func StoreMaxDuration(dir, dataDir string) (time.Duration, error) {
	nets, _, err := ReadConfDir(dir)
	if err != nil {
		return 0, err
	}
	longest, found := time.Duration(0), false
	want := filepath.Clean(dataDir)
	for _, n := range nets {
		for _, p := range n.Plugins {
			s, ok, err := pluginStore(p)
			if err != nil || !ok {
				continue
			}
			if s.DataDir != want {
				break
			}
			var block struct {
				Reservation json.RawMessage `json:"reservation"`
			}
			if err := json.Unmarshal(p.IPAM, &block); err != nil {
				return 0, fmt.Errorf("%s: network %s: ipam: %w", n.File, n.Name, err)
			}
			c := Config{Reservation: ReservationConfig{MaxDuration: contract.DefaultMaxDuration}}
			if err := c.loadReservation(block.Reservation); err != nil {
				return 0, fmt.Errorf("%s: network %s: %w", n.File, n.Name, err)
			}
			longest, found = max(longest, c.Reservation.MaxDuration), true
			break
		}
	}
	if !found {
		longest = contract.DefaultMaxDuration
	}
	return longest, nil
}
