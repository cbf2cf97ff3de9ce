package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// netnsDir is where `ip netns` keeps named namespaces.
const netnsDir = "/var/run/netns"

var netnsSeq atomic.Int64

// Netns is a named network namespace made by a test (`ip netns add`).
type Netns struct {
	// Name is the `ip netns` name, unique per test process.
	Name string
	// Path is the namespace's bind mount, what CNI calls the netns path.
	Path string
}

// NewNetns creates a network namespace with loopback up, deleted at cleanup.
// prefix makes the name readable; a process- and call-unique suffix is added.
func NewNetns(t testing.TB, prefix string) *Netns {
	t.Helper()
	n, err := CreateNetns(prefix)
	if n != nil {
		t.Cleanup(func() { n.Delete() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// CreateNetns is NewNetns for programs that are not tests (the benchmark
// driver): the caller deletes the namespace. On error a namespace that was
// created is returned with the error, for the caller to delete.
func CreateNetns(prefix string) (*Netns, error) {
	name := fmt.Sprintf("sip%d-%s%d", os.Getpid()%100000, prefix, netnsSeq.Add(1))
	if _, err := Run(nil, "ip", "netns", "add", name); err != nil {
		return nil, err
	}
	n := &Netns{Name: name, Path: filepath.Join(netnsDir, name)}
	if _, err := Run(nil, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return n, err
	}
	return n, nil
}

// Delete removes the namespace (as a reboot or a runtime would); deleting an
// already deleted namespace is not an error.
func (n *Netns) Delete() error {
	if _, err := os.Stat(n.Path); os.IsNotExist(err) {
		return nil
	}
	_, err := Run(nil, "ip", "netns", "del", n.Name)
	return err
}

// Exec runs a command inside the namespace (`ip netns exec`), with env added
// to the environment, and returns its stdout.
func (n *Netns) Exec(env []string, name string, args ...string) (string, error) {
	return Run(env, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Addrs returns the global-scope addresses (CIDR form) of interface ifname in
// the namespace at nsPath. nsPath may be a /proc/<pid>/ns/net path.
func Addrs(nsPath, ifname string) ([]string, error) {
	out, err := Run(nil, "nsenter", "--net="+nsPath, "ip", "-j", "addr", "show", "dev", ifname, "scope", "global")
	if err != nil {
		return nil, err
	}
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		return nil, fmt.Errorf("parse ip -j addr: %w: %s", err, out)
	}
	var addrs []string
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if a.Local == "" {
				continue // ip -j prints filtered-out addresses as empty objects
			}
			addrs = append(addrs, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
		}
	}
	return addrs, nil
}
