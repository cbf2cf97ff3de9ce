//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
)

// setIPAM changes keys of the ipam block of the node's conflist (the tests'
// way to a small range or a short reuse delay).
func (n *node) setIPAM(t *testing.T, keys map[string]any) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.confDir, "*.conflist"))
	if len(files) != 1 {
		t.Fatalf("want one conflist in %s, have %v", n.confDir, files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	for _, pl := range list["plugins"].([]any) {
		if ipam, ok := pl.(map[string]any)["ipam"].(map[string]any); ok {
			for k, v := range keys {
				ipam[k] = v
			}
		}
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityAnnotation: a Deployment's pod has a new random name each
// time; with stickyip.io/identity its replacement gets the identity's IP.
// While the old pod still runs (a rolling update with surge) the new one is
// told to try again; the same key in another namespace is another identity.
func TestIdentityAnnotation(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ann := map[string]string{annIdentity: "web", annDuration: "10m"}
	old := harness.PodArgs{Namespace: "default", Name: "web-5d8f7-abcde", UID: "rs1-a", Annotations: ann}
	oldNS := n.podNetns(t, "old")
	ips := n.add(t, oldNS, old)
	if rows := entriesFor(n.list(t), "default", "identity:web"); len(rows) != 1 || rows[0].IP != ips[0] {
		t.Fatalf("stickyip list for identity default/identity:web: %+v; want %v", rows, ips)
	}

	// Surge: the replacement starts while the old pod runs.
	next := harness.PodArgs{Namespace: "default", Name: "web-6c9a1-fghij", UID: "rs2-b", Annotations: ann}
	nextNS := n.podNetns(t, "next")
	_, err := n.tool.Add(t, n.net, nextNS.Path, next)
	if err == nil || !strings.Contains(err.Error(), harness.CNIToolContainerID(oldNS.Path)) || !strings.Contains(err.Error(), "try again") {
		t.Fatalf("replacement while the old pod runs: err %v; want try again naming the holder", err)
	}
	n.tool.Del(n.net, nextNS.Path, next) // the runtime cleans up the failed ADD

	// The old pod goes; the replacement (new name, new UID) gets its IP.
	n.del(t, oldNS, old)
	oldNS.Delete()
	if got := n.add(t, nextNS, next); !slices.Equal(got, ips) {
		t.Fatalf("replacement got %v, want the identity's %v", got, ips)
	}
	requireAddrs(t, nextNS, ips)

	// Same key, other namespace: another identity, another IP.
	other := harness.PodArgs{Namespace: "team-a", Name: "web-0", UID: "t-1", Annotations: ann}
	if got := n.add(t, n.podNetns(t, "teama"), other); slices.Equal(got, ips) {
		t.Fatalf("team-a's pod with key web got default/web's IP %v", got)
	}
	n.check(t)
}

// TestIdentityIsNotAPodName: a pod author's
// stickyip.io/identity: db-0 is not the StatefulSet pod db-0. While db-0's
// address is reserved, the pod mimic annotated with that key gets another
// address on its eth0, db-0's stays reserved for db-0, and db-0 re-created
// gets it back.
func TestIdentityIsNotAPodName(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	db0 := harness.PodArgs{Namespace: "default", Name: "db-0", UID: "sts-1", Annotations: map[string]string{annDuration: "10m"}}
	ns0 := n.podNetns(t, "db0")
	ips := n.add(t, ns0, db0)
	n.del(t, ns0, db0)
	ns0.Delete()

	mimic := harness.PodArgs{Namespace: "default", Name: "mimic", UID: "m-1",
		Annotations: map[string]string{annIdentity: "db-0", annDuration: "10m"}}
	nsM := n.podNetns(t, "mimic")
	got := n.add(t, nsM, mimic)
	if slices.Equal(got, ips) {
		t.Fatalf("a pod annotated stickyip.io/identity: db-0 got the pod db-0's reserved %v", ips)
	}
	requireAddrs(t, nsM, got)
	if rows := entriesFor(n.list(t), "default", "db-0"); len(rows) != 1 || rows[0].IP != ips[0] || rows[0].State != "reserved" {
		t.Fatalf("db-0's entries after the mimic's ADD: %+v; want %v still reserved", rows, ips)
	}
	db0.UID = "sts-2"
	ns1 := n.podNetns(t, "db0b")
	if again := n.add(t, ns1, db0); !slices.Equal(again, ips) {
		t.Fatalf("db-0 re-created got %v, want its reserved %v", again, ips)
	}
	requireAddrs(t, ns1, ips)
	n.check(t)
}

// TestIPsAnnotation: a pod names its address; it is on its eth0. Another
// pod asking for it is refused naming the holder; an address outside the
// network's ranges is an error naming the annotation.
func TestIPsAnnotation(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	const want = "10.244.1.50"
	p1 := harness.PodArgs{Namespace: "default", Name: "registry", UID: "r-1",
		Annotations: map[string]string{annIPs: want, annDuration: "10m"}}
	ns1 := n.podNetns(t, "reg")
	if got := n.add(t, ns1, p1); !slices.Equal(got, []string{want}) {
		t.Fatalf("pod asking for %s got %v", want, got)
	}
	requireAddrs(t, ns1, []string{want})

	p2 := harness.PodArgs{Namespace: "default", Name: "intruder", UID: "i-1", Annotations: map[string]string{annIPs: want}}
	ns2 := n.podNetns(t, "intr")
	if _, err := n.tool.Add(t, n.net, ns2.Path, p2); err == nil || !strings.Contains(err.Error(), "default/registry") {
		t.Fatalf("second pod asking for %s: err %v; want a refusal naming default/registry", want, err)
	}
	n.tool.Del(n.net, ns2.Path, p2)

	p3 := harness.PodArgs{Namespace: "default", Name: "lost", UID: "l-1", Annotations: map[string]string{annIPs: "10.9.9.9"}}
	ns3 := n.podNetns(t, "lost")
	if _, err := n.tool.Add(t, n.net, ns3.Path, p3); err == nil || !strings.Contains(err.Error(), annIPs) || !strings.Contains(err.Error(), "10.9.9.9") {
		t.Fatalf("pod asking for an address outside the ranges: err %v; want an error naming %s and the address", err, annIPs)
	}
	n.tool.Del(n.net, ns3.Path, p3)

	// With its reservation, the registry re-created gets the same address.
	n.del(t, ns1, p1)
	ns1.Delete()
	p1.UID = "r-2"
	if got := n.add(t, n.podNetns(t, "reg2"), p1); !slices.Equal(got, []string{want}) {
		t.Fatalf("re-created registry got %v, want %s", got, want)
	}
}

// TestReuseDelayAndStatus on a four-address range: an address freed a
// moment ago is skipped while another is free (host-local would hand it out
// again as it wraps), and `stickyip status` agrees with `stickyip list`.
func TestReuseDelayAndStatus(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	const delay = 4 * time.Second
	n.setIPAM(t, map[string]any{
		"ranges":      [][]map[string]string{{{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.13"}}},
		"reservation": map[string]string{"reuseDelay": delay.String()},
	})
	pods := map[string]*harness.Netns{}
	args := func(name string) harness.PodArgs {
		return harness.PodArgs{Namespace: "default", Name: name, UID: name + "-uid"}
	}
	add := func(name string) string {
		t.Helper()
		pods[name] = n.podNetns(t, name)
		return n.add(t, pods[name], args(name))[0]
	}
	del := func(name string) {
		t.Helper()
		n.del(t, pods[name], args(name))
		pods[name].Delete()
	}
	for i, name := range []string{"a", "b", "c", "d"} { // .10 .. .13, the round robin at .13
		if ip, want := add(name), fmt.Sprintf("10.88.0.%d", 10+i); ip != want {
			t.Fatalf("%s got %s, want %s", name, ip, want)
		}
	}
	del("a")
	del("c")
	time.Sleep(delay + time.Second) // .10 and .12 are free for good
	del("b")                        // .11 freed just now
	if st := n.status(t); st.Allocated != 1 || st.Cooling != 1 || st.Free != 2 {
		t.Fatalf("stickyip status after freeing .10 and .12 5s ago and .11 now: %+v; want 1 allocated, 1 cooling, 2 free", st)
	}
	if got := add("x"); got != "10.88.0.10" {
		t.Fatalf("first ADD after the wrap got %s, want 10.88.0.10", got)
	}
	if got := add("y"); got != "10.88.0.12" {
		t.Fatalf("second ADD got %s; want 10.88.0.12: 10.88.0.11 was freed less than %s ago", got, delay)
	}
	// status and list agree: .10 .12 .13 allocated (x, y, d), .11 cooling.
	status := n.status(t)
	byState := map[string]int{}
	for _, e := range n.list(t) {
		if e.State == "cooling" && e.ExpiresAt != nil && !e.ExpiresAt.After(time.Now()) {
			continue // past its delay: free
		}
		byState[e.State]++
	}
	if status.Size != 4 || status.Allocated != byState["allocated"] || status.Cooling != byState["cooling"] ||
		status.Reserved != byState["reserved"] || status.Free != 4-byState["allocated"]-byState["cooling"]-byState["reserved"] ||
		status.Allocated != 3 || status.Cooling != 1 {
		t.Fatalf("stickyip status %+v; stickyip list by state %v", status, byState)
	}
	t.Logf("stickyip status: %+v", status)
	// Once the delay is over the cooling address is free again.
	time.Sleep(delay)
	if got := add("z"); got != "10.88.0.11" {
		t.Fatalf("ADD after the delay got %s, want 10.88.0.11", got)
	}
}

// status runs `stickyip status --json` on the node's CNI configs and returns
// its one range set.
func (n *node) status(t *testing.T) ipam.SetSummary {
	t.Helper()
	o := n.plugin(t).Tool("status", "--cni-conf-dir", n.confDir, "--json")
	var pools []admin.PoolStatus
	if err := json.Unmarshal(o.Stdout, &pools); err != nil || o.ExitCode != 0 || len(pools) != 1 || len(pools[0].Sets) != 1 {
		t.Fatalf("stickyip status: %s (%v)", o.Describe(), err)
	}
	return pools[0].Sets[0]
}

// TestContainerdIdentity: through containerd, a Deployment-style pod with a
// new name and UID gets its identity's IP on its eth0.
func TestContainerdIdentity(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	_, cri := n.startContainerd(t)
	ann := map[string]string{annIdentity: "agent", annDuration: "10"}
	id1, ips1 := runPod(t, cri, harness.Pod{Name: "agent-x7k2p", Namespace: "kube-system", UID: "ds-1", Annotations: ann})
	deletePod(t, cri, id1)
	_, ips2 := runPod(t, cri, harness.Pod{Name: "agent-q9w4z", Namespace: "kube-system", UID: "ds-2", Annotations: ann})
	if !slices.Equal(ips1, ips2) {
		t.Fatalf("the replacement pod got %v, want the identity's %v", ips2, ips1)
	}
	if rows := entriesFor(n.list(t), "kube-system", "identity:agent"); len(rows) != 1 || rows[0].State != "allocated" {
		t.Fatalf("stickyip list for kube-system/identity:agent: %+v", rows)
	}
}
