package contract

// The container runtime's CNI result cache: the file libcni writes after
// every successful ADD, for each network and interface of a sandbox, and
// removes after its DEL (containerd and CRI-O both use libcni:
// /var/lib/cni/results/<network>-<container ID>-<ifname>). Each holds what
// that ADD was given and returned: the network and its config, the
// sandbox's container ID, interface and network namespace, its CNI_ARGS
// (the pod's namespace, name and UID), its capability arguments (the pod's
// annotations) and the result (its addresses). A store rebuild
// (checkpointd/rebuild) reads it as one of the node's own sources; the
// plugin reads it to tell a lost data directory from a new one
// (ipam.CacheWitness).
//
// libcni writes the files with a plain write (not atomically): a file cut
// short by a crash does not parse and is reported, never guessed at.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// cniCacheKindV1 is the only format libcni writes ("kind" of every file).
const cniCacheKindV1 = "cniCacheV1"

// annotationsCapability is the capability argument that carries the pod's
// annotations (containerd ≥ 1.5, CRI-O).
const annotationsCapability = "io.kubernetes.cri.pod-annotations"

// maxCNICacheFile bounds what is read of one file: a result and a config
// are a few KiB; anything far larger is not libcni's.
const maxCNICacheFile = 1 << 20

// CNICacheEntry is one cached ADD.
type CNICacheEntry struct {
	Network     string
	ContainerID string
	IfName      string
	Netns       string
	// Args are the CNI_ARGS pairs, in order.
	Args [][2]string
	// Annotations are the pod's annotations (nil when the runtime passed none).
	Annotations map[string]string
	// IPs are the addresses of the result.
	IPs []netip.Addr
	// Config is the network configuration the ADD ran with, as libcni
	// cached it (the conflist, or the single config, as bytes).
	Config []byte
	// Written is the file's modification time: when the ADD ended.
	Written time.Time
}

// Arg returns the value of CNI_ARGS key k ("" when absent).
func (e *CNICacheEntry) Arg(k string) string {
	for _, p := range e.Args {
		if p[0] == k {
			return p[1]
		}
	}
	return ""
}

// cniCacheFile is a cache file as libcni writes it, as far as it is read.
type cniCacheFile struct {
	Kind           string                     `json:"kind"`
	ContainerID    string                     `json:"containerId"`
	Config         []byte                     `json:"config"`
	IfName         string                     `json:"ifName"`
	NetworkName    string                     `json:"networkName"`
	NetNS          string                     `json:"netns"`
	CniArgs        [][2]string                `json:"cniArgs"`
	CapabilityArgs map[string]json.RawMessage `json:"capabilityArgs"`
	Result         *cniCacheResult            `json:"result"`
}

// cniCacheResult is a CNI result of any version: "ips" (0.3.0 and later), or
// "ip4"/"ip6" (0.1.0, 0.2.0).
type cniCacheResult struct {
	IPs []struct {
		Address string `json:"address"`
	} `json:"ips"`
	IP4 *struct {
		IP string `json:"ip"`
	} `json:"ip4"`
	IP6 *struct {
		IP string `json:"ip"`
	} `json:"ip6"`
}

// ParseCNICacheFile reads one cache file named name. The name must be the
// one libcni gives the file (<network>-<container ID>-<ifname>), every
// address must parse, and the annotations, when present, must be a string
// map: anything else is an error naming what is wrong.
func ParseCNICacheFile(name string, data []byte) (CNICacheEntry, error) {
	var f cniCacheFile
	if err := json.Unmarshal(data, &f); err != nil {
		return CNICacheEntry{}, fmt.Errorf("%s: not a CNI result cache file: %v", name, err)
	}
	switch {
	case f.Kind != cniCacheKindV1:
		return CNICacheEntry{}, fmt.Errorf("%s: kind %q, want %q", name, Clip(f.Kind, ClipLen), cniCacheKindV1)
	case f.NetworkName == "" || f.ContainerID == "" || f.IfName == "":
		return CNICacheEntry{}, fmt.Errorf("%s: network, container ID or interface missing", name)
	case name != f.NetworkName+"-"+f.ContainerID+"-"+f.IfName:
		return CNICacheEntry{}, fmt.Errorf("%s: holds network %q, container %q, interface %q (not the file's name)", name, Clip(f.NetworkName, ClipLen), Clip(f.ContainerID, ClipLen), Clip(f.IfName, ClipLen))
	case f.Result == nil:
		return CNICacheEntry{}, fmt.Errorf("%s: no result", name)
	}
	e := CNICacheEntry{Network: f.NetworkName, ContainerID: f.ContainerID, IfName: f.IfName, Netns: f.NetNS, Args: f.CniArgs, Config: f.Config}
	if raw, ok := f.CapabilityArgs[annotationsCapability]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &e.Annotations); err != nil {
			return CNICacheEntry{}, fmt.Errorf("%s: capability %s is not a map of strings: %v", name, annotationsCapability, err)
		}
	}
	var addrs []string
	for _, ip := range f.Result.IPs {
		addrs = append(addrs, ip.Address)
	}
	for _, ip := range []*struct {
		IP string `json:"ip"`
	}{f.Result.IP4, f.Result.IP6} {
		if ip != nil {
			addrs = append(addrs, ip.IP)
		}
	}
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil || p.Addr().Zone() != "" {
			return CNICacheEntry{}, fmt.Errorf("%s: result address %q is not an address with a prefix length", name, Clip(a, ClipLen))
		}
		if ip := p.Addr().Unmap(); !slices.Contains(e.IPs, ip) {
			e.IPs = append(e.IPs, ip)
		}
	}
	return e, nil
}

// ReadCNICache reads every cache file in dir. A missing directory holds none (the
// runtime never added a sandbox to a network). Files that cannot be read or
// parsed are returned as problems, each naming its file: their addresses
// are unknown. The error is for a directory that cannot be listed.
func ReadCNICache(dir string) ([]CNICacheEntry, []error, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("CNI result cache %s: %w", dir, err)
	}
	var out []CNICacheEntry
	var problems []error
	for _, de := range ents {
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		e, err := readCNICacheFile(filepath.Join(dir, de.Name()))
		if err != nil {
			problems = append(problems, err)
			continue
		}
		out = append(out, e)
	}
	return out, problems, nil
}

func readCNICacheFile(path string) (CNICacheEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return CNICacheEntry{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return CNICacheEntry{}, err
	}
	if fi.Size() > maxCNICacheFile {
		return CNICacheEntry{}, fmt.Errorf("%s: %d bytes, more than a cache file holds", path, fi.Size())
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && fi.Size() > 0 {
		return CNICacheEntry{}, fmt.Errorf("%s: %w", path, err)
	}
	e, err := ParseCNICacheFile(filepath.Base(path), data)
	if err != nil {
		return CNICacheEntry{}, fmt.Errorf("%s: %w", filepath.Dir(path), err)
	}
	e.Written = fi.ModTime()
	return e, nil
}
