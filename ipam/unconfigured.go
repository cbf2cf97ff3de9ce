package ipam

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// UnconfiguredNetwork is a network of a store that holds sticky records
// while the CNI configuration no longer keeps that network's records in
// that store: the conflist was switched back to another IPAM (a flannel
// chart upgrade that put its own cni-conf.json back, a k3s restart without
// --flannel-cni-conf), names another dataDir, or is gone. New pods then get
// addresses elsewhere, which may hand out an address a reservation or a
// running pod holds, and no reservation is honoured.
type UnconfiguredNetwork struct {
	Network string
	// Reserved counts live reservations; Sticky, allocations recorded with
	// a reservation duration (they become reservations at DEL).
	Reserved, Sticky int
	// Now says what the CNI configuration has for the network instead.
	Now string
}

// UnconfiguredNetworks returns, in network order, the networks of the
// store in dataDir that hold sticky records (entries, read from that store)
// while no stickyip network of the CNI config dir confDir keeps its records
// there. A store holding none has nothing to lose: nothing is reported.
func UnconfiguredNetworks(confDir, dataDir string, entries []reservation.Entry, now time.Time) ([]UnconfiguredNetwork, error) {
	c, err := ReadConf(confDir)
	if err != nil {
		return nil, err
	}
	return c.Unconfigured(dataDir, entries, now), nil
}

// Unconfigured is UnconfiguredNetworks on the directory as read.
func (c *Conf) Unconfigured(dataDir string, entries []reservation.Entry, now time.Time) []UnconfiguredNetwork {
	stores, _ := c.Stores()
	byNet := map[string]*UnconfiguredNetwork{}
	var order []string
	for _, e := range entries {
		reserved := e.State == reservation.Reserved && !e.Expired(now)
		sticky := e.State == reservation.Allocated && e.Duration > 0
		if !reserved && !sticky {
			continue
		}
		if slices.ContainsFunc(stores, func(s NetworkStore) bool { return s.Network == e.Network && s.DataDir == filepath.Clean(dataDir) }) {
			continue
		}
		u := byNet[e.Network]
		if u == nil {
			u = &UnconfiguredNetwork{Network: e.Network}
			byNet[e.Network] = u
			order = append(order, e.Network)
		}
		if reserved {
			u.Reserved++
		} else {
			u.Sticky++
		}
	}
	slices.Sort(order)
	var out []UnconfiguredNetwork
	for _, n := range order {
		u := byNet[n]
		u.Now = c.configuredAs(n, stores)
		out = append(out, *u)
	}
	return out
}

// configuredAs says what the CNI config dir has for network: another
// store, another IPAM, or nothing.
func (c *Conf) configuredAs(network string, stores []NetworkStore) string {
	if i := slices.IndexFunc(stores, func(s NetworkStore) bool { return s.Network == network }); i >= 0 {
		return fmt.Sprintf("%s keeps its records in %s", stores[i].File, stores[i].DataDir)
	}
	for _, n := range c.Networks {
		if n.Name == network {
			return fmt.Sprintf("%s gives it IPAM %s", n.File, ipamOf(n))
		}
	}
	return fmt.Sprintf("no config of network %s in %s", network, c.Dir)
}

// ipamOf names the IPAM of a network's first plugin that has one; the
// flannel plugin without one delegates to host-local.
func ipamOf(n ConfNetwork) string {
	for _, p := range n.Plugins {
		var block struct {
			Type string `json:"type"`
		}
		if len(p.IPAM) > 0 && json.Unmarshal(p.IPAM, &block) == nil && block.Type != "" {
			return block.Type
		}
		if p.Type == "flannel" {
			return "host-local (the flannel plugin's default)"
		}
	}
	return "none"
}
