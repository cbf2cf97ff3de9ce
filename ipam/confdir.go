package ipam

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/stickyip/stickyip/contract"
)

// ConfPlugin is one plugin entry of a CNI network config, as far as stickyip
// reads it.
type ConfPlugin struct {
	Type       string          `json:"type"`
	SubnetFile string          `json:"subnetFile"` // the flannel plugin's
	IPAM       json.RawMessage `json:"ipam"`
}

// ConfNetwork is a network configured in a CNI config directory.
type ConfNetwork struct {
	Name, CNIVersion, File string
	Plugins                []ConfPlugin
}

// ReadConfDir reads the network configs in dir as a runtime picks them:
// *.conflist, *.conf and *.json in name order, the first file of a network
// name wins. Files that do not parse are skipped and named in problems.
func ReadConfDir(dir string) (nets []ConfNetwork, problems []string, err error) {
	confDirReads.Add(1)
	var files []string
	for _, pat := range []string{"*.conflist", "*.conf", "*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, nil, err
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		n, err := ParseNetwork(data)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		n.File = f
		nets = append(nets, n)
	}
	return nets, problems, nil
}

// ParseNetwork reads one network config: a conflist, or a single plugin's
// config (its one plugin entry).
func ParseNetwork(data []byte) (ConfNetwork, error) {
	var nc struct {
		Name       string       `json:"name"`
		CNIVersion string       `json:"cniVersion"`
		Plugins    []ConfPlugin `json:"plugins"`
		ConfPlugin
	}
	if err := json.Unmarshal(data, &nc); err != nil || nc.Name == "" {
		return ConfNetwork{}, fmt.Errorf("not a network config (%v)", err)
	}
	plugins := nc.Plugins
	if len(plugins) == 0 {
		plugins = []ConfPlugin{nc.ConfPlugin}
	}
	return ConfNetwork{Name: nc.Name, CNIVersion: nc.CNIVersion, Plugins: plugins}, nil
}

// StickyipNetwork is a configured network whose IPAM is stickyip.
type StickyipNetwork struct {
	*Config
	// File is the CNI config file it comes from.
	File string
}

// StickyipNetworks returns the config of every network in dir whose plugins
// use stickyip as IPAM, parsed by LoadConfig as a CNI call would be. For the
// flannel plugin without explicit ranges, the range is the node subnet of
// its subnet file, as the flannel plugin fills it in.
func StickyipNetworks(dir string) (map[string]StickyipNetwork, []string, error) {
	c, err := ReadConf(dir)
	if err != nil {
		return nil, nil, err
	}
	return c.Stickyip, c.StickyipProblems, nil
}

// NetworkEngine returns the engine of network, built from its config in the
// CNI config dir confDir as StickyipNetworks reads it, provided that config
// keeps its records in dataDir (the store the caller opened). Otherwise it
// returns ErrNoNetworkConfig: a network's records are changed only by the
// rules of its own config (reuse delay, pool-full policy, host-local import).
func NetworkEngine(confDir, network, dataDir string, env Env) (*Engine, error) {
	c, err := ReadConf(confDir)
	if err != nil {
		return nil, fmt.Errorf("%w: network %s: %v", ErrNoNetworkConfig, network, err)
	}
	return c.Engine(network, dataDir, env)
}

func pluginConfig(n ConfNetwork, p ConfPlugin) (*Config, error) {
	if len(p.IPAM) == 0 {
		return nil, nil
	}
	var ipam map[string]any
	if err := json.Unmarshal(p.IPAM, &ipam); err != nil {
		return nil, err
	}
	if ipam["type"] != contract.PluginType {
		return nil, nil
	}
	_, hasRanges := ipam["ranges"]
	_, hasSubnet := ipam["subnet"]
	if p.Type == "flannel" && !hasRanges && !hasSubnet {
		file := cmp.Or(p.SubnetFile, contract.DefaultFlannelSubnetFile)
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("flannel's subnet file: %w", err)
		}
		lease, err := contract.ParseFlannelLease(data)
		if err != nil {
			return nil, err
		}
		var sets []any
		for _, s := range lease.Subnets() {
			sets = append(sets, []any{map[string]any{"subnet": s.String()}})
		}
		ipam["ranges"] = sets
	}
	version := cmp.Or(n.CNIVersion, "1.0.0")
	if strings.HasPrefix(version, "0.1") || strings.HasPrefix(version, "0.2") {
		version = "0.3.1"
	}
	conf, err := json.Marshal(map[string]any{"cniVersion": version, "name": n.Name, "ipam": ipam})
	if err != nil {
		return nil, err
	}
	return LoadConfig(conf, "")
}

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
