package ipam

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
)

// Conf is a CNI config directory read once: its networks as a runtime
// picks them and, parsed, those whose IPAM is stickyip. A daemon reads it
// once per pass and asks it every question of that pass (which engine
// rules a network, which store it keeps its records in), rather than
// reading the directory again for each.
type Conf struct {
	// Dir is the directory read.
	Dir string
	// Networks are the network configs, as ReadConfDir returns them.
	Networks []ConfNetwork
	// Problems name the files that could not be read or parsed.
	Problems []string
	// Stickyip are the networks whose IPAM is stickyip, by name, as
	// StickyipNetworks returns them.
	Stickyip map[string]StickyipNetwork
	// StickyipProblems adds to Problems the stickyip networks whose IPAM
	// block does not load.
	StickyipProblems []string
}

// confDirReads counts ReadConfDir's reads of a directory (ConfDirReads).
var confDirReads atomic.Int64

// ConfDirReads returns how many times this process has read a CNI config
// directory (each ReadConfDir): what a daemon's test counts to hold it to
// one read per pass.
func ConfDirReads() int64 { return confDirReads.Load() }

// ReadConf reads the CNI config directory dir once.
func ReadConf(dir string) (*Conf, error) {
	nets, problems, err := ReadConfDir(dir)
	if err != nil {
		return nil, err
	}
	c := &Conf{Dir: dir, Networks: nets, Problems: problems, Stickyip: map[string]StickyipNetwork{}}
	c.StickyipProblems = slices.Clone(problems)
	for _, n := range nets {
		for _, p := range n.Plugins {
			sc, err := pluginConfig(n, p)
			if err != nil {
				c.StickyipProblems = append(c.StickyipProblems, fmt.Sprintf("%s: network %s: %v", n.File, n.Name, err))
				continue
			}
			if sc != nil {
				c.Stickyip[n.Name] = StickyipNetwork{Config: sc, File: n.File}
				break
			}
		}
	}
	return c, nil
}

// Engine returns the engine of network, built from its stickyip config,
// provided that config keeps its records in dataDir (the store the caller
// opened); otherwise ErrNoNetworkConfig (NetworkEngine's rule).
func (c *Conf) Engine(network, dataDir string, env Env) (*Engine, error) {
	sc, ok := c.Stickyip[network]
	switch {
	case !ok && len(c.StickyipProblems) > 0:
		return nil, fmt.Errorf("%w: network %s is not configured in %s (skipped files: %s)", ErrNoNetworkConfig, network, c.Dir, strings.Join(c.StickyipProblems, "; "))
	case !ok:
		return nil, fmt.Errorf("%w: network %s is not configured in %s", ErrNoNetworkConfig, network, c.Dir)
	case filepath.Clean(sc.DataDir) != filepath.Clean(dataDir):
		return nil, fmt.Errorf("%w: network %s in %s keeps its records in %s, not in %s", ErrNoNetworkConfig, network, sc.File, sc.DataDir, dataDir)
	}
	return NewEngine(sc.Config, env), nil
}

// Stores returns where each stickyip network keeps its records, sorted by
// network, and the networks whose IPAM block cannot be read
// (NetworkStores' answer).
func (c *Conf) Stores() ([]NetworkStore, []string) {
	problems := slices.Clone(c.Problems)
	var out []NetworkStore
	for _, n := range c.Networks {
		s, ok, err := n.Store()
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: network %s: %v", n.File, n.Name, err))
			continue
		}
		if ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b NetworkStore) int { return strings.Compare(a.Network, b.Network) })
	return out, problems
}
