//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
)

// Annotation keys of the pod-facing contract.
const (
	annDuration     = "io.kubernetes.cri/reserved-ip-duration"
	annCheckpointOf = "stickyip.io/checkpoint-of"
	annConfigSource = "kubernetes.io/config.source"
	annIdentity     = "stickyip.io/identity"
	annIPs          = "stickyip.io/ips"
)

// The example configs under conf/ the tests run with (only paths substituted).
const (
	flannelConf = "10-flannel-stickyip.conflist"
	bridgeConf  = "10-bridge-stickyip.conflist"
	// k3sConf is the --flannel-cni-conf file of docs/install.md's k3s
	// section: k3s's own chain (flannel with forceAddress, portmap,
	// bandwidth) with stickyip as flannel's IPAM.
	k3sConf = "k3s-flannel-stickyip.conflist"
)

// Flannel's subnet on the fake node.
const (
	flannelNetwork = "10.244.0.0/16"
	flannelSubnet  = "10.244.1.1/24"
)

// node is one fake node: a network namespace with its own CNI config, data
// directories and (optionally) a containerd.
type node struct {
	ns      *harness.Netns
	dir     string
	binDir  string
	confDir string
	// net is the network name of the conflist in confDir.
	net string
	// dataDir is stickyip's data dir; hostLocalDir host-local's (dataDir key).
	dataDir, hostLocalDir, logFile string
	tool                           harness.CNITool
}

// stickyipBin returns the plugin binary built by `make build`, skipping the
// test when it is missing.
func stickyipBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STICKYIP_BIN"); p != "" {
		return p
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", "stickyip")
	if _, err := os.Stat(p); err != nil {
		harness.Missing(t, "%s missing (run make build)", p)
	}
	return p
}

// newNode makes a node namespace and renders conflist (a file under
// conf/) into the node's conf dir with every path moved under the test's
// directory; ipamType, when set, replaces the IPAM type.
func newNode(t *testing.T, conflist, ipamType string) *node {
	t.Helper()
	harness.RequireRoot(t)
	n := &node{ns: harness.NewNetns(t, "node"), dir: t.TempDir()}
	n.binDir = harness.CNIBinDir(t)
	n.confDir = filepath.Join(n.dir, "net.d")
	n.dataDir = filepath.Join(n.dir, "stickyip")
	n.hostLocalDir = filepath.Join(n.dir, "networks")
	n.logFile = filepath.Join(n.dir, "stickyip.log")
	for _, d := range []string{n.confDir, n.dataDir, n.hostLocalDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	subnetFile := filepath.Join(n.dir, "subnet.env")
	env := fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", flannelNetwork, flannelSubnet)
	if err := os.WriteFile(subnetFile, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	n.writeConf(t, conflist, ipamType)
	n.tool = harness.CNITool{Node: n.ns, BinDir: n.binDir, ConfDir: n.confDir}
	t.Cleanup(func() {
		if t.Failed() {
			if data, err := os.ReadFile(n.logFile); err == nil {
				t.Logf("stickyip log:\n%s", data)
			}
		}
	})
	return n
}

// writeConf renders conflist (an example config under conf/) as the node's only
// network config, with ipamType as its IPAM ("" keeps the file's), making sure
// the IPAM binary is in the node's CNI bin dir.
func (n *node) writeConf(t *testing.T, conflist, ipamType string) {
	t.Helper()
	if ipamType == "" || ipamType == "stickyip" {
		link := filepath.Join(n.binDir, "stickyip")
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(stickyipBin(t), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, name, err := renderConflist(harness.ShippedConfig(t, conflist), paths{
		subnetFile:   filepath.Join(n.dir, "subnet.env"),
		flannelData:  filepath.Join(n.dir, "flannel"),
		dataDir:      n.dataDir,
		hostLocalDir: n.hostLocalDir,
		logFile:      n.logFile,
		ipamType:     ipamType,
	})
	if err != nil {
		t.Fatalf("render %s: %v", conflist, err)
	}
	n.net = name
	old, _ := filepath.Glob(filepath.Join(n.confDir, "*.conflist"))
	for _, f := range old {
		os.Remove(f)
	}
	if err := os.WriteFile(filepath.Join(n.confDir, conflist), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// paths are the values substituted into a conflist.
type paths struct {
	subnetFile, flannelData, dataDir, hostLocalDir, logFile, ipamType string
}

// renderConflist sets the path keys of every plugin (flannel's subnetFile and
// dataDir, the IPAM block's dataDir, hostLocalDataDir and logFile) and returns
// the new conflist and its network name. With ipamType "host-local" the IPAM
// keys host-local does not know are dropped and dataDir becomes host-local's.
func renderConflist(src []byte, p paths) ([]byte, string, error) {
	var list map[string]any
	if err := json.Unmarshal(src, &list); err != nil {
		return nil, "", err
	}
	plugins, _ := list["plugins"].([]any)
	for _, pl := range plugins {
		plugin, _ := pl.(map[string]any)
		if plugin["type"] == "flannel" {
			plugin["subnetFile"] = p.subnetFile
			plugin["dataDir"] = p.flannelData
		}
		ipam, ok := plugin["ipam"].(map[string]any)
		if !ok {
			continue
		}
		if p.ipamType == "host-local" {
			ipam["type"] = "host-local"
			ipam["dataDir"] = p.hostLocalDir
			for _, k := range []string{"hostLocalDataDir", "logFile", "reservation", "lockTimeout"} {
				delete(ipam, k)
			}
			continue
		}
		ipam["dataDir"] = p.dataDir
		ipam["hostLocalDataDir"] = p.hostLocalDir
		ipam["logFile"] = p.logFile
	}
	name, _ := list["name"].(string)
	out, err := json.MarshalIndent(list, "", "  ")
	return out, name, err
}

// entry is one element of `stickyip list --json`: the operator tool's own type.
type entry = admin.Entry

// operator runs the operator tool on the node's data dir and returns its
// output, or an error when it exits non-zero.
func (n *node) operator(t *testing.T, args ...string) (string, error) {
	o := n.plugin(t).Tool(append([]string{"--data-dir", n.dataDir}, args...)...)
	out := string(o.Stdout) + string(o.Stderr)
	if o.ExitCode != 0 || o.StartErr != nil {
		return out, fmt.Errorf("stickyip %s: %s", strings.Join(args, " "), o.Describe())
	}
	return out, nil
}

// list returns `stickyip list --json` for the node's network.
func (n *node) list(t *testing.T) []entry {
	t.Helper()
	return n.plugin(t).List(t, n.dataDir, "--network", n.net)
}

// check runs `stickyip check` and fails the test unless it exits 0.
func (n *node) check(t *testing.T) {
	t.Helper()
	n.plugin(t).RequireCheckOK(t, n.dataDir, "stickyip check")
}

// expire moves the times of ip's record back until its reservation or
// cooling ended a second ago, as the clock would: a test sees the end of a
// long reservation at once, and asserts the refusals before it whatever
// the host's speed.
func (n *node) expire(t *testing.T, ip string) {
	t.Helper()
	err := boltstore.New(n.dataDir, 0).Update(n.net, func(tx reservation.Txn) error {
		r, err := tx.Get(netip.MustParseAddr(ip))
		if err != nil {
			return err
		}
		if r == nil || !r.Timed() {
			return fmt.Errorf("%s is not reserved or cooling: %+v", ip, r)
		}
		back := time.Until(r.ExpiresAt) + time.Second
		r.AllocatedAt, r.ReleasedAt, r.ExpiresAt = r.AllocatedAt.Add(-back), r.ReleasedAt.Add(-back), r.ExpiresAt.Add(-back)
		return tx.Put(r)
	})
	if err != nil {
		t.Fatalf("expiring %s: %v", ip, err)
	}
}

// entriesFor returns the list rows of namespace/name.
func entriesFor(entries []entry, namespace, name string) []entry {
	var out []entry
	for _, e := range entries {
		if e.Namespace == namespace && e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// podNetns makes a pod network namespace for cnitool (one per sandbox: cnitool
// derives the container ID from its path).
func (n *node) podNetns(t *testing.T, prefix string) *harness.Netns {
	return harness.NewNetns(t, prefix)
}

// add runs cnitool add and fails the test on error.
func (n *node) add(t *testing.T, ns *harness.Netns, a harness.PodArgs) []string {
	t.Helper()
	res, err := n.tool.Add(t, n.net, ns.Path, a)
	if err != nil {
		t.Fatalf("cnitool add %s/%s: %v", a.Namespace, a.Name, err)
	}
	return res.Addrs()
}

// del runs cnitool del and fails the test on error.
func (n *node) del(t *testing.T, ns *harness.Netns, a harness.PodArgs) {
	t.Helper()
	if err := n.tool.Del(n.net, ns.Path, a); err != nil {
		t.Fatalf("cnitool del %s/%s: %v", a.Namespace, a.Name, err)
	}
}

// startContainerd starts a private containerd in the node namespace using the
// node's CNI dirs.
func (n *node) startContainerd(t *testing.T) (*harness.Containerd, *harness.CRIClient) {
	t.Helper()
	ctd := harness.StartContainerd(t, harness.ContainerdConfig{Node: n.ns, CNIBinDir: n.binDir, CNIConfDir: n.confDir})
	return ctd, ctd.CRI(t)
}

// runPod runs a sandbox and returns its ID and IPs (from PodSandboxStatus),
// after checking that the pod's eth0 really carries those IPs.
func runPod(t *testing.T, cri *harness.CRIClient, p harness.Pod) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := cri.RunPod(ctx, p)
	if err != nil {
		t.Fatalf("RunPodSandbox %s/%s: %v", p.Namespace, p.Name, err)
	}
	st, err := cri.PodStatus(ctx, id)
	if err != nil {
		t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	if !st.Ready || len(st.IPs) == 0 || st.PID == 0 {
		t.Fatalf("pod %s/%s: ready=%v ips=%v pid=%d", p.Namespace, p.Name, st.Ready, st.IPs, st.PID)
	}
	addrs, err := harness.Addrs(fmt.Sprintf("/proc/%d/ns/net", st.PID), "eth0")
	if err != nil {
		t.Fatal(err)
	}
	got := stripMasks(addrs)
	for _, ip := range st.IPs {
		if !slices.Contains(got, ip) {
			t.Fatalf("pod %s/%s: CRI reports IP %s but eth0 in the pod netns has %v", p.Namespace, p.Name, ip, addrs)
		}
	}
	return id, st.IPs
}

// deletePod stops and removes a sandbox.
func deletePod(t *testing.T, cri *harness.CRIClient, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cri.DeletePod(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// stripMasks turns CIDRs into bare IPs.
func stripMasks(cidrs []string) []string {
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		ip, _, _ := strings.Cut(c, "/")
		out = append(out, ip)
	}
	return out
}
