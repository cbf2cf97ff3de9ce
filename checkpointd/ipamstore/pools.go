package ipamstore

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"

	"github.com/stickyip/stickyip/checkpointd/flannel"
)

type pluginConf struct {
	Type       string          `json:"type"`
	SubnetFile string          `json:"subnetFile"`
	IPAM       json.RawMessage `json:"ipam"`
}

type netConf struct {
	Name    string       `json:"name"`
	Plugins []pluginConf `json:"plugins"`
	pluginConf
}

// Pools reads the CNI network configs in confDir (*.conflist, *.conf, *.json)
// and returns, per network name, the canonical range sets of every plugin
// whose IPAM type is "stickyip". For the flannel plugin without explicit
// ranges, the range is the node subnet from its subnet file, as the flannel
// plugin does. Files that do not parse are skipped.
func Pools(confDir string) (map[string][]allocator.RangeSet, error) {
	out := map[string][]allocator.RangeSet{}
	err := eachNetwork(confDir, func(name string, plugins []pluginConf) {
		for _, p := range plugins {
			sets, err := pluginRanges(name, p)
			if err == nil && len(sets) > 0 {
				out[name] = append(out[name], sets...)
			}
		}
	})
	return out, err
}

// eachNetwork calls fn with every network configured in confDir (*.conflist,
// *.conf, *.json, in file name order; the first file of a network name wins,
// as for the runtime). Files that do not parse are skipped.
func eachNetwork(confDir string, fn func(name string, plugins []pluginConf)) error {
	var files []string
	for _, pat := range []string{"*.conflist", "*.conf", "*.json"} {
		m, err := filepath.Glob(filepath.Join(confDir, pat))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var nc netConf
		if json.Unmarshal(data, &nc) != nil || nc.Name == "" || seen[nc.Name] {
			continue
		}
		seen[nc.Name] = true
		plugins := nc.Plugins
		if len(plugins) == 0 {
			plugins = []pluginConf{nc.pluginConf}
		}
		fn(nc.Name, plugins)
	}
	return nil
}

func pluginRanges(name string, p pluginConf) ([]allocator.RangeSet, error) {
	if len(p.IPAM) == 0 {
		return nil, nil
	}
	var ipam map[string]any
	if err := json.Unmarshal(p.IPAM, &ipam); err != nil {
		return nil, err
	}
	if ipam["type"] != "stickyip" {
		return nil, nil
	}
	_, hasRanges := ipam["ranges"]
	_, hasSubnet := ipam["subnet"]
	if p.Type == "flannel" && !hasRanges && !hasSubnet {
		subnets, err := flannelSubnets(p.SubnetFile)
		if err != nil {
			return nil, err
		}
		var sets []any
		for _, s := range subnets {
			sets = append(sets, []any{map[string]any{"subnet": s}})
		}
		ipam["ranges"] = sets
	}
	conf, err := json.Marshal(map[string]any{"name": name, "ipam": ipam})
	if err != nil {
		return nil, err
	}
	c, _, err := allocator.LoadIPAMConfig(conf, "")
	if err != nil {
		return nil, err
	}
	return c.Ranges, nil
}

func flannelSubnets(file string) ([]string, error) {
	if file == "" {
		file = flannel.DefaultSubnetFile
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || (k != "FLANNEL_SUBNET" && k != "FLANNEL_IPV6_SUBNET") || v == "" {
			continue
		}
		// flannel writes the gateway address with the prefix (10.244.1.1/24).
		_, n, err := net.ParseCIDR(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, k, err)
		}
		out = append(out, n.String())
	}
	return out, sc.Err()
}

// rangeSize counts the addresses a range hands out: start to end, minus the gateway.
func rangeSize(r *allocator.Range) *big.Int {
	start := new(big.Int).SetBytes(r.RangeStart.To16())
	end := new(big.Int).SetBytes(r.RangeEnd.To16())
	n := new(big.Int).Sub(end, start)
	n.Add(n, big.NewInt(1))
	if r.Gateway != nil && r.Contains(r.Gateway) {
		n.Sub(n, big.NewInt(1))
	}
	if n.Sign() < 0 {
		n.SetInt64(0)
	}
	return n
}

// freeIn returns the free addresses of network's range sets given the IPs
// that have a record (allocated or reserved).
func freeIn(sets []allocator.RangeSet, used []net.IP) int {
	total := new(big.Int)
	for i := range sets {
		for j := range sets[i] {
			total.Add(total, rangeSize(&sets[i][j]))
		}
	}
	for _, ip := range used {
		for i := range sets {
			if sets[i].Contains(ip) {
				total.Sub(total, big.NewInt(1))
				break
			}
		}
	}
	if !total.IsInt64() || total.Int64() > math.MaxInt32 {
		return math.MaxInt32
	}
	if total.Sign() < 0 {
		return 0
	}
	return int(total.Int64())
}

// FlannelNetworks returns the names of the networks in confDir whose flannel
// plugin reads subnetFile (flannel.DefaultSubnetFile when the plugin names none).
func FlannelNetworks(confDir, subnetFile string) ([]string, error) {
	var out []string
	err := eachNetwork(confDir, func(name string, plugins []pluginConf) {
		for _, p := range plugins {
			f := p.SubnetFile
			if f == "" {
				f = flannel.DefaultSubnetFile
			}
			if p.Type == "flannel" && filepath.Clean(f) == filepath.Clean(subnetFile) {
				out = append(out, name)
				return
			}
		}
	})
	return out, err
}
