//go:build integration

package integration

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

	"github.com/stickyip/stickyip/test/harness"
)

// Scenario 2: through containerd. RunPodSandbox → Stop/Remove → RunPodSandbox
// with the same name and a new UID returns the same IP, and the pod's eth0
// carries it (runPod checks it inside the pod's netns).
func TestContainerdReservation(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	_, cri := n.startContainerd(t)

	web := harness.Pod{Name: "web", Namespace: "default", UID: "web-uid-1", Annotations: map[string]string{annDuration: "10"}}
	id1, ips1 := runPod(t, cri, web)
	rows := entriesFor(n.list(t), "default", "web")
	if len(rows) != 1 || rows[0].State != "allocated" || rows[0].IP != ips1[0] || rows[0].ContainerID != id1 ||
		rows[0].UID != "web-uid-1" || rows[0].Duration != "10m0s" {
		t.Fatalf("stickyip list for default/web while running: %+v; want allocated %s to sandbox %s, uid web-uid-1, duration 10m0s", rows, ips1[0], id1)
	}

	deletePod(t, cri, id1)
	rows = entriesFor(n.list(t), "default", "web")
	if len(rows) != 1 || rows[0].State != "reserved" || rows[0].IP != ips1[0] {
		t.Fatalf("stickyip list for default/web after the sandbox was removed: %+v; want %s reserved", rows, ips1[0])
	}

	// Other pods meanwhile get other IPs; a pod without the annotation leaves nothing behind.
	_, otherIPs := runPod(t, cri, harness.Pod{Name: "other", Namespace: "default", UID: "other-uid"})
	if slices.Contains(otherIPs, ips1[0]) {
		t.Fatalf("default/other got web's reserved IP %s", ips1[0])
	}
	plainID, _ := runPod(t, cri, harness.Pod{Name: "plain", Namespace: "default", UID: "plain-uid"})
	deletePod(t, cri, plainID)
	if rows := entriesFor(n.list(t), "default", "plain"); len(rows) != 0 {
		t.Fatalf("stickyip list shows default/plain (no annotation) after its removal: %+v", rows)
	}

	web.UID = "web-uid-2"
	id2, ips2 := runPod(t, cri, web)
	if !slices.Equal(ips2, ips1) {
		t.Fatalf("re-created default/web got %v, want %v", ips2, ips1)
	}
	rows = entriesFor(n.list(t), "default", "web")
	if len(rows) != 1 || rows[0].State != "allocated" || rows[0].ContainerID != id2 || rows[0].UID != "web-uid-2" {
		t.Fatalf("stickyip list for default/web after re-creation: %+v; want allocated to %s, uid web-uid-2", rows, id2)
	}
	n.check(t)
}

// Scenarios 4 and 5: a restored static pod (checkpoint-of + config.source
// file, another pod name) receives the parent's reserved IP, an API pod with
// the same checkpoint-of does not; while the static copy holds the IP the
// returning parent gets the try-again error; after the copy is deleted the
// parent gets the IP.
func TestContainerdStaticPodRestore(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	_, cri := n.startContainerd(t)

	parent := harness.Pod{Name: "db", Namespace: "default", UID: "db-uid", Annotations: map[string]string{annDuration: "10"}}
	parentID, parentIPs := runPod(t, cri, parent)
	deletePod(t, cri, parentID) // the node lost the API server; the parent's sandbox went away

	// Scenario 4: an API pod claiming to be a checkpoint of db gets its own IP.
	impostor := harness.Pod{Name: "impostor", Namespace: "default", UID: "impostor-uid", Annotations: map[string]string{
		annCheckpointOf: "default/db", annDuration: "10"}}
	impostorID, impostorIPs := runPod(t, cri, impostor)
	if slices.Equal(impostorIPs, parentIPs) {
		t.Fatalf("API pod with %s=default/db got the parent's reserved IP %v", annCheckpointOf, parentIPs)
	}
	deletePod(t, cri, impostorID)
	if rows := entriesFor(n.list(t), "default", "db"); len(rows) != 1 || rows[0].State != "reserved" || rows[0].IP != parentIPs[0] {
		t.Fatalf("stickyip list for default/db after the impostor: %+v; want %s still reserved", rows, parentIPs[0])
	}

	// The restored static copy: the kubelet names it <name>-<node> and adds config.source.
	static := harness.Pod{Name: "db-node1", Namespace: "default", UID: "static-uid", Annotations: map[string]string{
		annCheckpointOf: "default/db", annConfigSource: "file", annDuration: "10"}}
	staticID, staticIPs := runPod(t, cri, static)
	if !slices.Equal(staticIPs, parentIPs) {
		t.Fatalf("restored static pod got %v, want the parent's reserved %v", staticIPs, parentIPs)
	}
	rows := entriesFor(n.list(t), "default", "db")
	if len(rows) != 1 || rows[0].State != "allocated" || rows[0].ContainerID != staticID {
		t.Fatalf("stickyip list for default/db while the static copy runs: %+v; want allocated to %s", rows, staticID)
	}

	// Scenario 5: the parent returns while the copy still runs.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := cri.RunPod(ctx, parent)
	if err == nil {
		t.Fatal("returning parent got a sandbox while the static copy holds its IP; want the try-again error")
	}
	for _, want := range []string{parentIPs[0], "try again", staticID} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("returning parent's RunPodSandbox error %q does not mention %q", err, want)
		}
	}
	// The plugin itself answers CNI error 11 (try again later): call it as
	// bridge does, with the delegate config flannel saved for the copy.
	conf := n.flannelDelegate(t, staticID)
	conf["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": parent.Annotations}
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	o := n.plugin(t).CNI(harness.CNICall{Command: "ADD", ContainerID: "parent-retry", Netns: "/proc/self/ns/net",
		IfName: "eth0", Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=db;K8S_POD_UID=db-uid", Stdin: stdin})
	if o.Err == nil || o.Err.Code != 11 || !strings.Contains(o.Err.Text(), staticID) {
		t.Fatalf("stickyip ADD for the returning parent: %s; want CNI error code 11 naming the holder %s", o.Describe(), staticID)
	}

	// The refused ADD and the runtime's cleanup DEL left the copy alone.
	st, err := cri.PodStatus(ctx, staticID)
	if err != nil {
		t.Fatal(err)
	}
	if addrs, err := harness.Addrs(fmt.Sprintf("/proc/%d/ns/net", st.PID), "eth0"); err != nil || !slices.Contains(stripMasks(addrs), parentIPs[0]) {
		t.Fatalf("static copy's eth0 has %v (%v) after the parent was refused, want %s", addrs, err, parentIPs[0])
	}

	deletePod(t, cri, staticID)
	parentID2, parentIPs2 := runPod(t, cri, parent)
	if !slices.Equal(parentIPs2, parentIPs) {
		t.Fatalf("parent after the static copy was deleted got %v, want %v", parentIPs2, parentIPs)
	}
	rows = entriesFor(n.list(t), "default", "db")
	if len(rows) != 1 || rows[0].ContainerID != parentID2 || rows[0].UID != "db-uid" {
		t.Fatalf("stickyip list for default/db after the parent came back: %+v; want allocated to %s uid db-uid", rows, parentID2)
	}
	n.check(t)
}

// Scenario 6: reboot without DEL. The runtime and every sandbox are killed and
// their netns removed (containerd's state dir, a tmpfs on a real node, is
// wiped); after the restart the reserved pod gets its IP back, and the
// operator tool's gc, list and check show nothing leaked.
func TestContainerdRebootWithoutDel(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ctd, cri := n.startContainerd(t)

	db := harness.Pod{Name: "db", Namespace: "default", UID: "db-uid-1", Annotations: map[string]string{annDuration: "10"}}
	dbID, dbIPs := runPod(t, cri, db)
	webID, webIPs := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "web-uid-1"})

	ctd.Crash(t)
	if rows := n.list(t); len(rows) != 2 {
		t.Fatalf("stickyip list after the crash: %+v; want the two allocations no DEL released", rows)
	}
	ctd.Restart(t)
	cri = ctd.CRI(t)

	// db is re-created by its controller (new UID) before anything cleaned up.
	db.UID = "db-uid-2"
	dbID2, dbIPs2 := runPod(t, cri, db)
	if !slices.Equal(dbIPs2, dbIPs) {
		t.Fatalf("db after the reboot got %v, want %v", dbIPs2, dbIPs)
	}

	// The operator's gc releases web's dead allocation by the network's own
	// rules: it cools down (reuseDelay) as after a DEL. Nothing leaks.
	if out, err := n.operator(t, "gc", "--cni-conf-dir", n.confDir, "--network", n.net); err != nil {
		t.Fatalf("stickyip gc: %v\n%s", err, out)
	}
	rows := n.list(t)
	if !sameSet(ipsIn(rows, "cooling"), webIPs) || len(ipsIn(rows, "allocated")) != 1 || len(rows) != 1+len(webIPs) {
		t.Fatalf("stickyip list after the reboot and gc: %+v; want default/db allocated to %s and web's %v cooling", rows, dbID2, webIPs)
	}
	if db := entriesFor(rows, "default", "db"); len(db) != 1 || db[0].State != "allocated" || db[0].ContainerID != dbID2 {
		t.Fatalf("default/db after the reboot and gc: %+v; want allocated to %s", db, dbID2)
	}
	n.check(t)

	// The kubelet then removes the dead sandboxes (DEL without a netns): db's
	// new allocation is untouched.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range []string{dbID, webID} {
		if err := cri.DeletePod(ctx, id); err != nil {
			t.Fatalf("removing dead sandbox %s: %v", id, err)
		}
	}
	rows = entriesFor(n.list(t), "default", "db")
	if len(rows) != 1 || rows[0].ContainerID != dbID2 || rows[0].IP != dbIPs[0] {
		t.Fatalf("default/db after the dead sandboxes were removed: %+v; want allocated to %s", rows, dbID2)
	}
	n.check(t)
}

// flannelDelegate returns the delegate (bridge) config flannel saved for a
// sandbox at ADD, as it passes it to bridge and bridge to the IPAM.
func (n *node) flannelDelegate(t *testing.T, containerID string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dir, "flannel", containerID))
	if err != nil {
		t.Fatalf("flannel's saved config for %s: %v", containerID, err)
	}
	var conf map[string]any
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	return conf
}
