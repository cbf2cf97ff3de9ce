//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// What the runtime itself does on containerd 2.x (and, for comparison, on the
// legacy 1.6 run): which CNI verbs it calls, with what. The call recorder
// (test/harness/cnirecord), chained after stickyip's plugin, writes down every
// call the runtime makes to the network.

// TestContainerdCNICalls: with the CNI 1.1.0 bridge conflist, containerd
// passes the pod annotations and the pod's identity on ADD, on DEL, and on the
// DEL of a sandbox that died with the node (empty netns path); it calls
// STATUS on every CRI Status (2.x only) and never CHECK or GC. stickyip acts on
// each DEL (the reserved pods' allocations become reservations).
func TestContainerdCNICalls(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	rec := n.addRecorder(t)
	ctd, cri := n.startContainerd(t)
	requireCNI110(t, ctd)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ann := map[string]string{annDuration: "10", "example.com/team": "storage"}
	db := harness.Pod{Name: "db", Namespace: "default", UID: "db-uid", Annotations: ann}
	dbID, dbIPs := runPod(t, cri, db)
	add := rec.only(t, "ADD", dbID)
	requirePodCall(t, add, db, dbID, ann)
	if !strings.HasPrefix(add.Netns, ctd.State+"/") {
		t.Fatalf("ADD of %s: CNI_NETNS %q, want the pod netns under containerd's state dir %s", dbID, add.Netns, ctd.State)
	}

	// StopPodSandbox DELs with the netns; containerd 2.x DELs again on
	// RemovePodSandbox, the netns then gone (empty path): stickyip must take
	// the second DEL as the no-op it is.
	deletePod(t, cri, dbID)
	dels := rec.requireDELs(t, db, dbID, ann, add.Netns)
	t.Logf("containerd %s: stop and remove of a sandbox called DEL %d times", ctd.Version, len(dels))
	if got := ipsIn(entriesFor(n.list(t), "default", "db"), "reserved"); !sameSet(got, dbIPs) {
		t.Fatalf("after the DEL, default/db has %v reserved, want %v", got, dbIPs)
	}

	// A node reboot: the sandbox dies without a DEL and its netns with the
	// state dir. The kubelet later removes it; containerd then DELs with an
	// empty netns path (CNI: "the netns is gone") and the annotations again.
	web := harness.Pod{Name: "web", Namespace: "default", UID: "web-uid", Annotations: ann}
	webID, webIPs := runPod(t, cri, web)
	ctd.Crash(t)
	ctd.Restart(t)
	cri = ctd.CRI(t)
	if err := cri.DeletePod(ctx, webID); err != nil {
		t.Fatalf("removing the sandbox that died with the node: %v", err)
	}
	rec.requireDELs(t, web, webID, ann, "")
	if got := ipsIn(entriesFor(n.list(t), "default", "web"), "reserved"); !sameSet(got, webIPs) {
		t.Fatalf("after the DEL without netns, default/web has %v reserved, want %v", got, webIPs)
	}

	// STATUS: one call per CRI Status (the kubelet's poll), for the whole list.
	before := len(rec.calls(t, "STATUS"))
	requireNetworkReady(t, cri, true, "")
	statuses := rec.calls(t, "STATUS")
	if len(statuses) != before+1 {
		t.Fatalf("containerd %s: %d STATUS calls after one CRI Status (had %d); want one more", ctd.Version, len(statuses), before)
	}
	if s := statuses[len(statuses)-1]; s.CNIVersion != "1.1.0" || s.ContainerID != "" || s.Netns != "" {
		t.Fatalf("STATUS call %+v: want cniVersion 1.1.0 and no container", s)
	}
	for _, verb := range []string{"CHECK", "GC"} {
		if calls := rec.calls(t, verb); len(calls) != 0 {
			t.Fatalf("containerd %s called %s: %+v", ctd.Version, verb, calls)
		}
	}
	t.Logf("containerd %s called: %s", ctd.Version, rec.summary(t))
	n.check(t)
}

// TestContainerdNoStatusBefore110: with the flannel conflist (cniVersion
// 0.3.1, as kube-flannel ships it), containerd never calls STATUS, so the
// node's network readiness does not depend on stickyip at all.
func TestContainerdNoStatusBefore110(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	rec := n.addRecorder(t)
	ctd, cri := n.startContainerd(t)
	for range 3 {
		requireNetworkReady(t, cri, true, "")
	}
	id, _ := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "web-uid", Annotations: map[string]string{annDuration: "5"}})
	if got := rec.only(t, "ADD", id).Annotations()[annDuration]; got != "5" {
		t.Fatalf("flannel chain: the ADD carried %s=%q, want 5", annDuration, got)
	}
	if calls := rec.calls(t, "STATUS"); len(calls) != 0 {
		t.Fatalf("containerd %s called STATUS on a cniVersion 0.3.1 conflist: %+v", ctd.Version, calls)
	}
}

// TestContainerdNetworkReady: what the kubelet reads from CRI Status (and
// puts in the node's Ready condition) while stickyip's pool is full, while
// its store is damaged, after the damaged store was moved aside (lost: still
// not ready), and after the store was rebuilt (ready, the running pods'
// addresses kept).
// The shipped CNI 1.1.0 bridge conflist, its range narrowed to 3 addresses,
// poolFull: fail.
func TestContainerdNetworkReady(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	n.narrowPool(t, "fail")
	rec := n.addRecorder(t)
	ctd, cri := n.startContainerd(t)
	requireCNI110(t, ctd)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Fill the pool: one reservation and two live pods.
	reserved := harness.Pod{Name: "db", Namespace: "default", UID: "db-uid", Annotations: map[string]string{annDuration: "30"}}
	dbID, _ := runPod(t, cri, reserved)
	deletePod(t, cri, dbID)
	var live []string
	for _, name := range []string{"web-1", "web-2"} {
		id, _ := runPod(t, cri, harness.Pod{Name: name, Namespace: "default", UID: name + "-uid"})
		live = append(live, id)
	}
	rows := n.list(t)
	if len(ipsIn(rows, "reserved")) != 1 || len(ipsIn(rows, "allocated")) != 2 {
		t.Fatalf("stickyip list: %+v; want 1 reserved and 2 allocated addresses (the whole range)", rows)
	}

	// The next pod fails with stickyip's error 100; the network stays ready,
	// STATUS after STATUS, and none of them logs an error.
	_, err := cri.RunPod(ctx, harness.Pod{Name: "one-too-many", Namespace: "default", UID: "x-uid"})
	if err == nil || !strings.Contains(err.Error(), "no free IP address") {
		t.Fatalf("RunPodSandbox with the pool full: %v; want stickyip's \"no free IP address\"", err)
	}
	t.Logf("full pool, RunPodSandbox: %v", err)
	before := len(rec.calls(t, "STATUS"))
	for range 5 {
		requireNetworkReady(t, cri, true, "")
	}
	if got := len(rec.calls(t, "STATUS")); got != before+5 {
		t.Fatalf("%d STATUS calls reached the end of the chain for 5 CRI Status calls, want 5", got-before)
	}
	if lines := statusErrorLines(t, n.logFile); len(lines) > 0 {
		t.Fatalf("stickyip logged errors for STATUS with the pool full:\n%s", strings.Join(lines, "\n"))
	}

	// A damaged store: the network is not ready, with stickyip's message.
	db := filepath.Join(n.dataDir, "stickyip.db")
	if err := os.WriteFile(db, []byte(strings.Repeat("not a bbolt database\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	cond := requireNetworkReady(t, cri, false, "stickyip cannot allocate addresses on this node")
	for _, want := range []string{db, "stickyip check"} {
		if !strings.Contains(cond.Message, want) {
			t.Fatalf("NetworkReady message %q does not mention %q", cond.Message, want)
		}
	}
	if cond.Reason != "NetworkPluginNotReady" {
		t.Fatalf("NetworkReady reason %q, want NetworkPluginNotReady", cond.Reason)
	}
	t.Logf("damaged store, NetworkReady=false: reason %s, message %q", cond.Reason, cond.Message)
	if len(statusErrorLines(t, n.logFile)) == 0 {
		t.Fatal("stickyip logged no error for the failing STATUS")
	}

	// The file moved aside, as an operator would have done before stores were
	// rebuilt: a lost store is no empty one (its running pods' addresses are
	// unknown), the network stays not ready, saying so.
	if err := os.Rename(db, db+".damaged"); err != nil {
		t.Fatal(err)
	}
	requireNetworkReady(t, cri, false, "this node had a store")
	// The rebuild (checkpointd's, here its one-shot form) brings it back
	// with the running pods' addresses: no drain (TestContainerdStoreRebuild).
	rebuildStore(t, n, ctd.Address, filepath.Join(n.dir, "checkpoints"))
	requireNetworkReady(t, cri, true, "")
	rows = n.list(t)
	if len(ipsIn(rows, "allocated")) != 2 {
		t.Fatalf("after the rebuild: %+v; want web-1's and web-2's addresses allocated", rows)
	}
	for _, id := range live {
		if err := cri.DeletePod(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	runPod(t, cri, harness.Pod{Name: "after-repair", Namespace: "default", UID: "r-uid"})
	n.check(t)
}

// TestContainerdSandboxImage: the sandbox runs the harness's pause image,
// which containerd 2.x's CRI reports pinned (pinned_images.sandbox), so the
// kubelet's image GC never removes it.
func TestContainerdSandboxImage(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ctd, cri := n.startContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, _ := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "web-uid"})
	st, err := cri.PodStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.PID))
	if err != nil || strings.TrimRight(string(cmdline), "\x00") != "/pause" {
		t.Fatalf("sandbox process %d runs %q (%v), want the harness's /pause", st.PID, cmdline, err)
	}
	img, err := cri.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: harness.PauseImage}})
	if err != nil || img.GetImage() == nil {
		t.Fatalf("CRI ImageStatus %s: %v %v", harness.PauseImage, img, err)
	}
	if ctd.Major >= 2 && !img.GetImage().GetPinned() {
		t.Fatalf("containerd %s: sandbox image %s not pinned", ctd.Version, harness.PauseImage)
	}
	t.Logf("containerd %s: sandbox image %s pinned=%v", ctd.Version, harness.PauseImage, img.GetImage().GetPinned())
}

// requireCNI110 skips the test on the legacy containerd 1.6: its libcni
// cannot read the CNI 1.1.0 results of the bridge conflist ("unsupported CNI
// result version"), and it has no STATUS.
func requireCNI110(t *testing.T, ctd *harness.Containerd) {
	t.Helper()
	if ctd.Major < 2 {
		t.Skipf("containerd %s cannot run a cniVersion 1.1.0 conflist (libcni before v1.2)", ctd.Version)
	}
}

// TestContainerdConfigCurrent: the configuration the harness writes for
// containerd 2.x uses no deprecated key (containerd reports deprecations in
// CRI Status; cgroup v1, which this kind of machine has, is the only one
// allowed).
func TestContainerdConfigCurrent(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ctd, cri := n.startContainerd(t)
	if ctd.Major < 2 {
		t.Skipf("containerd %s reports no deprecations in CRI Status", ctd.Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conds, err := cri.Conditions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := conds["ContainerdHasNoDeprecationWarnings"]
	if !ok {
		t.Fatalf("containerd %s: no ContainerdHasNoDeprecationWarnings condition in %v", ctd.Version, conds)
	}
	t.Logf("containerd %s: %s=%v %s", ctd.Version, c.Type, c.Status, c.Message)
	if c.Status {
		return
	}
	var warnings map[string]string
	if err := json.Unmarshal([]byte(c.Message), &warnings); err != nil {
		t.Fatalf("deprecation condition message %q: %v", c.Message, err)
	}
	for id, msg := range warnings {
		if id != "io.containerd.deprecation/cgroup-v1" {
			t.Errorf("containerd %s: deprecated %s: %s", ctd.Version, id, msg)
		}
	}
}

// recorder is the call recorder chained into a node's conflist.
type recorder struct{ path string }

// addRecorder builds the call recorder into the node's CNI bin dir and
// appends it to the node's conflist.
func (n *node) addRecorder(t *testing.T) *recorder {
	t.Helper()
	harness.BuildRecorder(t, n.binDir)
	r := &recorder{path: filepath.Join(n.dir, "cni-calls.jsonl")}
	n.editConf(t, func(list map[string]any) {
		list["plugins"] = append(list["plugins"].([]any), harness.RecorderPlugin(r.path))
	})
	return r
}

// calls returns the recorded calls of verb.
func (r *recorder) calls(t *testing.T, verb string) []harness.RecordedCall {
	t.Helper()
	all, err := harness.RecordedCalls(r.path)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(all, func(c harness.RecordedCall) bool { return c.Command != verb })
}

// forContainer returns the recorded calls of verb for container id.
func (r *recorder) forContainer(t *testing.T, verb, id string) []harness.RecordedCall {
	t.Helper()
	return slices.DeleteFunc(r.calls(t, verb), func(c harness.RecordedCall) bool { return c.ContainerID != id })
}

// only returns the one call of verb for container id.
func (r *recorder) only(t *testing.T, verb, id string) harness.RecordedCall {
	t.Helper()
	calls := r.forContainer(t, verb, id)
	if len(calls) != 1 {
		t.Fatalf("%d %s calls for container %s, want 1: %+v", len(calls), verb, id, calls)
	}
	return calls[0]
}

// summary counts the recorded calls by verb.
func (r *recorder) summary(t *testing.T) string {
	all, err := harness.RecordedCalls(r.path)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, c := range all {
		count[c.Command]++
	}
	var out []string
	for _, verb := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%s×%d", verb, count[verb]))
	}
	return strings.Join(out, " ")
}

// requireDELs checks the DELs of sandbox id: at least one, the first with
// CNI_NETNS netns ("" when the netns died with the node), any later one with
// an empty netns path (it is gone by then), each with the pod's identity and
// annotations. It returns them.
func (r *recorder) requireDELs(t *testing.T, p harness.Pod, id string, ann map[string]string, netns string) []harness.RecordedCall {
	t.Helper()
	dels := r.forContainer(t, "DEL", id)
	if len(dels) == 0 {
		t.Fatalf("no DEL for sandbox %s of %s/%s", id, p.Namespace, p.Name)
	}
	for i, del := range dels {
		requirePodCall(t, del, p, id, ann)
		want := ""
		if i == 0 {
			want = netns
		}
		if del.Netns != want {
			t.Fatalf("DEL %d of %d for %s: CNI_NETNS %q, want %q", i+1, len(dels), id, del.Netns, want)
		}
	}
	return dels
}

// requirePodCall checks the pod identity (CNI_ARGS) and the annotations a
// runtime passed on a call for sandbox id.
func requirePodCall(t *testing.T, c harness.RecordedCall, p harness.Pod, id string, ann map[string]string) {
	t.Helper()
	args := strings.Split(c.Args, ";")
	for _, want := range []string{"IgnoreUnknown=1", "K8S_POD_NAMESPACE=" + p.Namespace, "K8S_POD_NAME=" + p.Name,
		"K8S_POD_UID=" + p.UID, "K8S_POD_INFRA_CONTAINER_ID=" + id} {
		if !slices.Contains(args, want) {
			t.Fatalf("%s of %s: CNI_ARGS %q lack %s", c.Command, id, c.Args, want)
		}
	}
	got := c.Annotations()
	for k, v := range ann {
		if got[k] != v {
			t.Fatalf("%s of %s: pod annotations %v, want %s=%q among them", c.Command, id, got, k, v)
		}
	}
	if c.IfName != "eth0" {
		t.Fatalf("%s of %s: CNI_IFNAME %q, want eth0", c.Command, id, c.IfName)
	}
}

// requireNetworkReady calls CRI Status and checks the NetworkReady
// condition's status and that its message contains msg; it returns the
// condition.
func requireNetworkReady(t *testing.T, cri *harness.CRIClient, ready bool, msg string) *runtimeapi.RuntimeCondition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conds, err := cri.Conditions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := conds[runtimeapi.NetworkReady]
	if !ok {
		t.Fatalf("CRI Status has no NetworkReady condition: %v", conds)
	}
	if c.Status != ready || !strings.Contains(c.Message, msg) {
		t.Fatalf("CRI Status NetworkReady=%v reason %q message %q; want %v with %q", c.Status, c.Reason, c.Message, ready, msg)
	}
	return c
}

// narrowPool keeps the node's bridge conflist as shipped but for its ranges
// (one IPv4 range of 3 addresses, 10.88.0.10-12) and reservation.poolFull.
func (n *node) narrowPool(t *testing.T, poolFull string) {
	t.Helper()
	n.editConf(t, func(list map[string]any) {
		ipam := list["plugins"].([]any)[0].(map[string]any)["ipam"].(map[string]any)
		ipam["ranges"] = []any{[]any{map[string]any{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.12"}}}
		ipam["routes"] = []any{map[string]any{"dst": "0.0.0.0/0"}}
		ipam["reservation"].(map[string]any)["poolFull"] = poolFull
	})
}

// conflistFile returns the path of the node's only conflist.
func (n *node) conflistFile(t *testing.T) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(n.confDir, "*.conflist"))
	if len(files) != 1 {
		t.Fatalf("want one conflist in %s, have %v", n.confDir, files)
	}
	return files[0]
}

// editConf applies edit to the node's only conflist.
func (n *node) editConf(t *testing.T, edit func(list map[string]any)) {
	t.Helper()
	file := n.conflistFile(t)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	edit(list)
	if data, err = json.MarshalIndent(list, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// statusErrorLines returns the ERROR lines of stickyip's log that no
// container call wrote (STATUS and GC run without a container ID).
func statusErrorLines(t *testing.T, logFile string) []string {
	t.Helper()
	data, err := os.ReadFile(logFile)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, `container=""`) {
			out = append(out, line)
		}
	}
	return out
}
