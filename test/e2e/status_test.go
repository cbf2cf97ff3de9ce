//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the node reports when stickyip's pool is full, when its store is
// damaged and after the operator repaired it, on kubelet 1.36 + containerd 2.x
// with the CNI 1.1.0 bridge conflist (containerd calls CNI STATUS on every CRI
// Status the kubelet polls, and a failing STATUS makes the node NotReady).

const (
	// bridgeRange is the node's pool: conf/10-bridge-stickyip.conflist
	// narrowed to three addresses.
	bridgeSubnet = "10.88.0.0/24"
	bridgeStart  = "10.88.0.10"
	bridgeEnd    = "10.88.0.12"

	// fullPoolWatch is how long the node must stay Ready with the pool full:
	// far longer than the kubelet's status cycle (it asks the runtime every
	// 5 s and posts a changed Ready condition at the next
	// nodeStatusUpdateFrequency tick, 5 s here).
	fullPoolWatch = 3*time.Minute + 10*time.Second

	msgPoolFull  = "stickyip: no free IP address"
	msgUnhealthy = "stickyip cannot allocate addresses on this node"
)

// TestNodeReadyWithStickyipStatus: fill the pool with live pods and a
// reservation — the node stays Ready for more than 3 minutes while the next
// pod fails with stickyip's error 100 in its events; damage the store, with
// checkpointd told not to rebuild it (--rebuild-store=false) — the node's
// Ready condition turns False with stickyip's message, and checkpointd says
// so (metric, Event); move the store aside — still NotReady (a lost store is
// not an empty one); `checkpointd rebuild-store` (docs/troubleshooting.md,
// "Error 102") — the node is Ready again, the running pods keep their
// addresses, and a new pod runs without a drain.
func TestNodeReadyWithStickyipStatus(t *testing.T) {
	if _, major, err := harness.ContainerdVersion(); err == nil && major < 2 {
		t.Skip("containerd before 2.0 calls no CNI STATUS and cannot run the cniVersion 1.1.0 conflist (STICKYIP_CONTAINERD)")
	}
	var calls string // the CNI call recorder's file
	n := newNode(t, nodeOptions{ipam: "stickyip", cni: func(n *node) []string {
		calls = filepath.Join(n.dir, "cni-calls.jsonl")
		return n.writeBridgeConfig(calls)
	}})
	n.startControlPlane()
	n.startContainerd()
	t.Logf("runtime: containerd %s; CNI: conf/10-bridge-stickyip.conflist (cniVersion 1.1.0), range %s-%s, poolFull fail",
		n.ctd.Version, bridgeStart, bridgeEnd)
	n.startKubelet(true)
	n.startCheckpointd("CHECKPOINTD_REBUILD_STORE=false")
	ctx := context.Background()
	ready := n.readyCondition(ctx)
	t.Logf("node %s: Ready=%s (%s)", nodeName, ready.Status, ready.Message)

	// Phase 1: the pool full of live pods and a reservation.
	n.createPod(testPod("db", map[string]string{annReservation: "30"}))
	dbIP := n.waitAPIPodRunning("db", 3*time.Minute)
	n.deletePodGracefully("db", 2*time.Minute)
	live := map[string]string{}
	for _, name := range []string{"web-1", "web-2"} {
		n.createPod(testPod(name, nil))
		live[name] = n.waitAPIPodRunning(name, 2*time.Minute)
	}
	entries := n.stickyipList(t)
	if reserved, allocated := countStates(entries); reserved != 1 || allocated != 2 {
		t.Fatalf("stickyip list: %+v; want db's %s reserved and 2 allocated (the whole range)", entries, dbIP)
	}
	t.Logf("pool full: %s reserved for default/db, %s web-1, %s web-2", dbIP, live["web-1"], live["web-2"])

	n.createPod(testPod("one-too-many", nil))
	var failed corev1.Event
	eventually(t, "event naming stickyip's error for one-too-many", 2*time.Minute, 2*time.Second, func() (bool, string) {
		for _, e := range n.podEvents(ctx, "one-too-many") {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, msgPoolFull) {
				failed = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("events: %v", eventReasons(n.podEvents(ctx, "one-too-many")))
	})
	t.Logf("pod one-too-many: %s %s: %s", failed.Type, failed.Reason, failed.Message)

	since := n.readyCondition(ctx).LastTransitionTime
	statusBefore := countCalls(t, calls, "STATUS")
	start := time.Now()
	polls := 0
	for time.Since(start) < fullPoolWatch {
		polls++
		c := n.readyCondition(ctx)
		if c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&since) {
			t.Fatalf("after %s with the pool full: node Ready=%s since %s (%s: %s); want True since %s",
				time.Since(start).Round(time.Second), c.Status, c.LastTransitionTime, c.Reason, c.Message, since)
		}
		for _, e := range n.namespaceEvents(ctx) {
			if e.Reason == "NetworkNotReady" {
				t.Fatalf("event %s on %s/%s with the pool full: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
			}
		}
		if err := n.kubelet.exited(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
	}
	watched := time.Since(start).Round(time.Second)
	statuses := countCalls(t, calls, "STATUS") - statusBefore
	if statuses < int(fullPoolWatch/(10*time.Second)) {
		t.Fatalf("only %d CNI STATUS calls in %s: the kubelet did not keep asking the runtime", statuses, watched)
	}
	attempts := int32(0)
	for _, e := range n.podEvents(ctx, "one-too-many") {
		if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, msgPoolFull) {
			attempts += max(e.Count, 1)
		}
	}
	p, err := n.client.CoreV1().Pods("default").Get(ctx, "one-too-many", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending || p.Status.PodIP != "" {
		t.Fatalf("one-too-many: phase %s, IP %q with the pool full; want Pending without IP", p.Status.Phase, p.Status.PodIP)
	}
	t.Logf("FULL POOL: node Ready=True for %s (%d polls, Ready since %s, unchanged); "+
		"%d CNI STATUS calls from containerd, all answered OK; one-too-many Pending, %d sandbox attempts failed with %q",
		watched, polls, since.Format(time.RFC3339), statuses, attempts, msgPoolFull)

	// Phase 2: a damaged store.
	db := filepath.Join(n.stickyipDataDir(), "stickyip.db")
	if err := os.WriteFile(db, []byte(strings.Repeat("not a bbolt database\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	damaged := time.Now()
	var notReady *corev1.NodeCondition
	eventually(t, "node NotReady with stickyip's message", time.Minute, time.Second, func() (bool, string) {
		c := n.readyCondition(ctx)
		notReady = c
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, msgUnhealthy), string(c.Status) + ": " + c.Message
	})
	for _, want := range []string{"NetworkReady=false", db, "stickyip check"} {
		if !strings.Contains(notReady.Message, want) {
			t.Fatalf("Ready condition message %q does not mention %q", notReady.Message, want)
		}
	}
	eventually(t, "checkpointd reports the damage", time.Minute, time.Second, func() (bool, string) {
		v, err := n.metric("checkpointd_ipam_store_damaged")
		return v == "1", fmt.Sprintf("checkpointd_ipam_store_damaged %q %v", v, err)
	})
	var said string
	eventually(t, "an IPAMStoreDamaged Event on the Node", time.Minute, time.Second, func() (bool, string) {
		for _, e := range n.nodeEvents(ctx) {
			if e.Reason == "IPAMStoreDamaged" {
				said = e.Message
				return true, ""
			}
		}
		return false, fmt.Sprint(eventReasons(n.nodeEvents(ctx)))
	})
	t.Logf("DAMAGED STORE: node Ready=%s after %s; reason %s; message %q; checkpointd (--rebuild-store=false) says: %s",
		notReady.Status, time.Since(damaged).Round(time.Second), notReady.Reason, notReady.Message, said)
	n.deletePodNow("one-too-many")

	// Phase 3: the damaged store moved aside: lost, not empty.
	if err := os.Rename(db, db+".damaged"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node NotReady saying the store was lost", time.Minute, time.Second, func() (bool, string) {
		c := n.readyCondition(ctx)
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "this node had a store"), string(c.Status) + ": " + c.Message
	})

	// Phase 4: the operator's one step: checkpointd rebuild-store.
	repaired := time.Now()
	n.rebuildStoreOnce()
	var back *corev1.NodeCondition
	eventually(t, "node Ready again", time.Minute, time.Second, func() (bool, string) {
		back = n.readyCondition(ctx)
		return back.Status == corev1.ConditionTrue, string(back.Status) + ": " + back.Message
	})
	t.Logf("REBUILT: node Ready=%s %s after checkpointd rebuild-store; reason %s; message %q", back.Status,
		time.Since(repaired).Round(time.Second), back.Reason, back.Message)
	held := map[string]string{}
	for _, e := range n.stickyipList(t) {
		if e.State == "allocated" {
			held[e.IP] = e.Name
		}
	}
	for name, ip := range live {
		if held[ip] != name {
			t.Fatalf("after the rebuild %s's %s is held by %q, want %s (list %v)", name, ip, held[ip], name, held)
		}
	}
	// No drain: the running pods keep their addresses; the new pod gets the
	// free one (db's reservation was known only to the lost store: this node
	// has no placement index and db no checkpoint).
	n.createPod(testPod("after-repair", nil))
	ip := n.waitAPIPodRunning("after-repair", 2*time.Minute)
	if !inRange(ip) || ip == live["web-1"] || ip == live["web-2"] {
		t.Fatalf("after-repair got %s, want the free address of %s-%s (web-1 %s, web-2 %s run)", ip, bridgeStart, bridgeEnd, live["web-1"], live["web-2"])
	}
	run(t, filepath.Join(n.bins.project, "stickyip"), "--data-dir", n.stickyipDataDir(), "check")
	t.Logf("without a drain, pod after-repair runs with %s beside web-1 %s and web-2 %s", ip, live["web-1"], live["web-2"])
}

// rebuildStoreOnce runs `checkpointd rebuild-store` with the node's
// checkpointd settings, in the node's namespaces, and waits for it.
func (n *node) rebuildStoreOnce() {
	t := n.t
	t.Helper()
	p := n.start("checkpointd-rebuild-store", n.checkpointdEnv(), filepath.Join(n.bins.project, "checkpointd"), "rebuild-store")
	eventually(t, "checkpointd rebuild-store", time.Minute, 500*time.Millisecond, func() (bool, string) { return !p.running(), "" })
	log, _ := os.ReadFile(p.logPath)
	if p.err != nil || !strings.Contains(string(log), "IPAM store rebuilt") {
		t.Fatalf("checkpointd rebuild-store: %v\n%s", p.err, log)
	}
}

// writeBridgeConfig writes the project's CNI 1.1.0 bridge conflist (conf/,
// bridge → stickyip) with its paths moved into the test's directory, its
// range narrowed to bridgeStart-bridgeEnd (IPv4 only), poolFull "fail", and
// the harness's call recorder chained last, writing to calls. It returns the
// recorder binary for the CNI bin dir.
func (n *node) writeBridgeConfig(calls string) []string {
	t := n.t
	t.Helper()
	conflist := harness.ShippedConflist(t, "10-bridge-stickyip.conflist")
	if v := conflist["cniVersion"]; v != "1.1.0" {
		t.Fatalf("conf/10-bridge-stickyip.conflist: cniVersion %v, want 1.1.0 (the version containerd calls STATUS for)", v)
	}
	plugins := conflist["plugins"].([]any)
	ipam := plugins[0].(map[string]any)["ipam"].(map[string]any)
	ipam["dataDir"] = n.stickyipDataDir()
	ipam["hostLocalDataDir"] = filepath.Join(n.dir, "host-local")
	ipam["logFile"] = filepath.Join(n.logDir, "stickyip.log")
	ipam["ranges"] = []any{[]any{map[string]any{"subnet": bridgeSubnet, "rangeStart": bridgeStart, "rangeEnd": bridgeEnd}}}
	ipam["routes"] = []any{map[string]any{"dst": "0.0.0.0/0"}}
	ipam["reservation"].(map[string]any)["poolFull"] = "fail"
	conflist["plugins"] = append(plugins, harness.RecorderPlugin(calls))
	js, err := json.MarshalIndent(conflist, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.cniConfDir(), "10-bridge-stickyip.conflist"), js, 0o644)
	dir := filepath.Join(n.dir, "cni-extra")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{harness.BuildRecorder(t, dir)}
}

// readyCondition returns the node's Ready condition from the API.
func (n *node) readyCondition(ctx context.Context) *corev1.NodeCondition {
	n.t.Helper()
	no, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	for i, c := range no.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return &no.Status.Conditions[i]
		}
	}
	n.t.Fatalf("node %s has no Ready condition: %+v", nodeName, no.Status.Conditions)
	return nil
}

// podEvents returns the events of pod default/name.
func (n *node) podEvents(ctx context.Context, name string) []corev1.Event {
	return n.eventList(ctx, "default", "involvedObject.kind=Pod,involvedObject.name="+name)
}

// nodeEvents returns the events of the node (the kubelet records them in
// the default namespace).
func (n *node) nodeEvents(ctx context.Context) []corev1.Event {
	return n.eventList(ctx, "default", "involvedObject.kind=Node,involvedObject.name="+nodeName)
}

// namespaceEvents returns every event of the default namespace.
func (n *node) namespaceEvents(ctx context.Context) []corev1.Event {
	return n.eventList(ctx, "default", "")
}

// eventList returns the events of namespace ns that selector (a field
// selector, "" for all) picks.
func (n *node) eventList(ctx context.Context, ns, selector string) []corev1.Event {
	n.t.Helper()
	l, err := n.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		n.t.Fatal(err)
	}
	return l.Items
}

// eventReasons summarises events as reason×count.
func eventReasons(events []corev1.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s×%d", e.Reason, max(e.Count, 1)))
	}
	slices.Sort(out)
	return out
}

// stickyipList runs the operator tool's list on the node's store.
func (n *node) stickyipList(t testing.TB) []admin.Entry {
	t.Helper()
	return (&harness.Plugin{Path: filepath.Join(n.bins.project, "stickyip")}).List(t, n.stickyipDataDir())
}

// countStates counts reserved and allocated addresses.
func countStates(entries []admin.Entry) (reserved, allocated int) {
	for _, e := range entries {
		switch e.State {
		case "reserved":
			reserved++
		case "allocated":
			allocated++
		}
	}
	return reserved, allocated
}

// countCalls counts the recorded CNI calls of verb.
func countCalls(t testing.TB, calls, verb string) int {
	t.Helper()
	all, err := harness.RecordedCalls(calls)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range all {
		if c.Command == verb {
			n++
		}
	}
	return n
}

// inRange reports whether ip is one of the pool's addresses.
func inRange(ip string) bool {
	return slices.Contains([]string{"10.88.0.10", "10.88.0.11", "10.88.0.12"}, ip)
}
