//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// Scenario 3: dual-stack ranges; a re-created pod gets both addresses back.
func TestDualStack(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	db := harness.PodArgs{Namespace: "default", Name: "db", UID: "db-1", Annotations: map[string]string{annDuration: "10"}}
	ns1 := n.podNetns(t, "db")
	ips := n.add(t, ns1, db)
	if len(ips) != 2 || !strings.HasPrefix(ips[0], "10.88.") || !strings.HasPrefix(ips[1], "fd88::") {
		t.Fatalf("dual-stack ADD got %v, want one 10.88.x.x and one fd88::x", ips)
	}
	requireAddrs(t, ns1, ips)
	if err := n.tool.Check(n.net, ns1.Path, db); err != nil {
		t.Fatalf("cnitool check (bridge → stickyip CHECK against the cached result): %v", err)
	}
	if err := n.tool.Status(n.net); err != nil {
		t.Fatalf("cnitool status: %v", err)
	}
	if rows := entriesFor(n.list(t), "default", "db"); len(rows) != 2 {
		t.Fatalf("stickyip list for default/db: %+v; want two allocations", rows)
	}

	n.del(t, ns1, db)
	ns1.Delete()
	rows := entriesFor(n.list(t), "default", "db")
	if !sameSet(ipsIn(rows, "reserved"), ips) {
		t.Fatalf("stickyip list for default/db after DEL: %+v; want both %v reserved", rows, ips)
	}

	other := n.add(t, n.podNetns(t, "other"), harness.PodArgs{Namespace: "default", Name: "other", UID: "o-1"})
	if slices.ContainsFunc(other, func(ip string) bool { return slices.Contains(ips, ip) }) {
		t.Fatalf("default/other got %v, overlapping db's reserved %v", other, ips)
	}

	db.UID = "db-2"
	ns2 := n.podNetns(t, "db")
	if got := n.add(t, ns2, db); !slices.Equal(got, ips) {
		t.Fatalf("re-created dual-stack pod got %v, want %v", got, ips)
	}
	requireAddrs(t, ns2, ips)
	n.check(t)
}

// Scenario 7: GC through cnitool with the cniVersion 1.1.0 bridge conflist
// (conf/10-bridge-stickyip.conflist, dual-stack)
// releases allocations of attachments that no longer exist.
func TestCNIToolGC(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	keep := harness.PodArgs{Namespace: "gc", Name: "keep", UID: "k-1", Annotations: map[string]string{annDuration: "10"}}
	drop := harness.PodArgs{Namespace: "gc", Name: "drop", UID: "d-1"}
	lost := harness.PodArgs{Namespace: "gc", Name: "lost", UID: "l-1"}
	keepNS, dropNS, lostNS := n.podNetns(t, "keep"), n.podNetns(t, "drop"), n.podNetns(t, "lost")
	keepIPs := n.add(t, keepNS, keep)
	n.add(t, dropNS, drop)
	n.add(t, lostNS, lost)

	// The sandboxes die without a DEL; for "lost" the runtime lost its
	// record too (libcni's cache), so only a GC can find it.
	for _, ns := range []*harness.Netns{keepNS, dropNS, lostNS} {
		ns.Delete()
	}
	n.tool.ForgetCache(n.net, lostNS.Path, "eth0")

	if err := n.tool.GC(n.net); err != nil {
		t.Fatalf("cnitool gc: %v", err)
	}
	rows := n.list(t)
	if got := ipsIn(entriesFor(rows, "gc", "keep"), "reserved"); !sameSet(got, keepIPs) {
		t.Fatalf("after cnitool gc, gc/keep: %+v; want %v reserved (it has the annotation)", entriesFor(rows, "gc", "keep"), keepIPs)
	}
	if r := entriesFor(rows, "gc", "drop"); len(r) != 0 {
		t.Fatalf("after cnitool gc, gc/drop still listed: %+v", r)
	}
	// The upstream bridge plugin (v1.9.1) does not pass GC on to its IPAM,
	// so an attachment libcni forgot is left to the operator tool's gc,
	// which finds its netns gone.
	if r := entriesFor(rows, "gc", "lost"); len(r) > 0 && r[0].State == "allocated" {
		t.Logf("gc/lost after cnitool gc: still allocated (bridge v1.9.1 has no GC)")
	}
	if out, err := n.operator(t, "gc", "--cni-conf-dir", n.confDir, "--network", n.net); err != nil {
		t.Fatalf("stickyip gc: %v\n%s", err, out)
	}
	if r := entriesFor(n.list(t), "gc", "lost"); len(r) != 0 {
		t.Fatalf("after stickyip gc, gc/lost (netns gone) still listed: %+v", r)
	}
	n.check(t)
}

// Scenario 7, the plugin's own CNI GC as a GC-aware delegating plugin calls
// it: attachments missing from cni.dev/valid-attachments are released, the
// valid ones stay.
func TestPluginGCValidAttachments(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	live := harness.PodArgs{Namespace: "gc", Name: "live", UID: "v-1"}
	gone := harness.PodArgs{Namespace: "gc", Name: "gone", UID: "g-1", Annotations: map[string]string{annDuration: "10"}}
	liveNS, goneNS := n.podNetns(t, "live"), n.podNetns(t, "gone")
	liveIPs := n.add(t, liveNS, live)
	goneIPs := n.add(t, goneNS, gone)

	conf := n.pluginConf(t, 0)
	conf["cni.dev/valid-attachments"] = []map[string]string{
		{"containerID": harness.CNIToolContainerID(liveNS.Path), "ifname": "eth0"},
	}
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runPlugin(t, n, "GC", stdin)
	if err != nil {
		t.Fatalf("stickyip GC: %v\n%s", err, out)
	}
	rows := n.list(t)
	if r := entriesFor(rows, "gc", "live"); !sameSet(ipsIn(r, "allocated"), liveIPs) {
		t.Fatalf("after GC, gc/live (valid): %+v; want %v still allocated", r, liveIPs)
	}
	if r := entriesFor(rows, "gc", "gone"); !sameSet(ipsIn(r, "reserved"), goneIPs) {
		t.Fatalf("after GC, gc/gone (not valid, annotated): %+v; want %v reserved", r, goneIPs)
	}
	n.check(t)
}

// pluginConf returns plugin i of the node's conflist as the runtime would
// pass it (name and cniVersion injected).
func (n *node) pluginConf(t *testing.T, i int) map[string]any {
	t.Helper()
	data, err := os.ReadFile(n.conflistFile(t))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Name       string           `json:"name"`
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	conf := list.Plugins[i]
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	return conf
}

// plugin runs bin/stickyip the way bridge would, inside the node namespace.
func (n *node) plugin(t *testing.T) *harness.Plugin {
	return &harness.Plugin{Path: stickyipBin(t), Netns: n.ns}
}

// runPlugin execs bin/stickyip as a CNI plugin with command cmd (and no pod)
// and returns its stdout, or an error with what it printed.
func runPlugin(t *testing.T, n *node, cmd string, stdin []byte) (string, error) {
	t.Helper()
	o := n.plugin(t).CNI(harness.CNICall{Command: cmd, Stdin: stdin})
	if !o.OK() {
		return string(o.Stdout), fmt.Errorf("stickyip %s: %s", cmd, o.Describe())
	}
	return string(o.Stdout), nil
}

// requireAddrs fails unless eth0 in ns carries every IP of want.
func requireAddrs(t *testing.T, ns *harness.Netns, want []string) {
	t.Helper()
	addrs, err := harness.Addrs(ns.Path, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	got := stripMasks(addrs)
	for _, ip := range want {
		if !slices.Contains(got, ip) {
			t.Fatalf("eth0 in %s has %v, want %v", ns.Name, addrs, want)
		}
	}
}

// ipsIn returns the IPs of the rows in state.
func ipsIn(rows []entry, state string) []string {
	var out []string
	for _, r := range rows {
		if r.State == state {
			out = append(out, r.IP)
		}
	}
	return out
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
