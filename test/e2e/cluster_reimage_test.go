//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
)

// reimageNS is the re-imaged-node step's namespace.
const reimageNS = "reimage"

// reimaged is what the re-imaged-node step keeps: its node, the addresses
// its record lists (db-0's, gone's) and the plain pods'.
type reimaged struct {
	n   *node
	ips map[string]string
}

// reimage is issue 49's scenario, a step of TestCluster: on node2, three
// plain pods, then a StatefulSet db (reserved-ip-duration 30, placement
// required) whose db-0 gets an address that is not the node's first free
// one, and a sticky pod gone deleted (its reservation in its record); their
// entries published in node2's NodeRecord (its own object: nothing of
// stickyip is on its Node). Then node2 is
// re-imaged (kubelet, checkpointd and kube-proxy killed, containerd with
// every pod of the node, its network and /run gone, as a power cut takes
// them: powerOff; stickyip's data directory, checkpointd's directories, the
// CNI result cache, the conflist and host-local's and flannel's state
// wiped), the plain pods and db-0 deleted from the API meanwhile (the
// StatefulSet creates db-0 again, which waits for node2), and started again
// with the same configuration: checkpointd reads node2's NodeRecord (its
// spec.nodeUID is the Node's) before any ADD is served, so db-0 comes back
// on node2 with its address, a new plain pod gets none of the addresses the
// record lists, gone re-created gets its own back. The same again with the
// API server away at node2's start (checkpointd holds the new store back
// until it can read the record), then back.
//
// The workloads' pods on node2 restart with the node (the sticky one with
// its address: its entry is taken back too); what the Node deletion
// compares them with is updated (w, when the workloads step ran).
func (c *cluster) reimage(w *workloadsRun) {
	c.applyPlacement() // as the placement step left it, or for this step alone
	c.ensurePlacementController()
	r := c.reimageSetup(c.nodes[1])
	for _, apiAway := range []bool{false, true} {
		c.reimageRound(r, apiAway)
	}
	c.refreshWorkloads(w, r.n)
	c.kubectl("delete", "namespace", reimageNS, "--wait=false")
}

// reimageSetup creates the step's pods on n and waits until its record
// lists db-0 running and gone reserved; n's Node carries nothing of
// stickyip (what a re-imaged node takes back is in its record alone).
func (c *cluster) reimageSetup(n *node) *reimaged {
	t := c.t
	ctx := context.Background()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: reimageNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(reimageNS)
	r := &reimaged{n: n, ips: map[string]string{}}
	for _, name := range []string{"plain-1", "plain-2", "plain-3"} {
		c.createOn(n, reimageNS, name, nil)
		r.ips[name] = n.waitPodRunningIn(reimageNS, name, 3*time.Minute)
	}
	tmpl := stickyPodTemplate("rdb", map[string]string{annReservation: "30", annPlacement: "required"})
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.name}
	c.createStatefulSet(reimageNS, "db", tmpl)
	r.ips["db-0"] = n.waitPodRunningIn(reimageNS, "db-0", 3*time.Minute)
	if first := firstPodAddr(n); r.ips["db-0"] == first {
		t.Fatalf("%s: db-0 got %s, the node's first free address: the step shows nothing", n.name, first)
	}
	c.createOn(n, reimageNS, "gone", map[string]string{annReservation: "30"})
	r.ips["gone"] = n.waitPodRunningIn(reimageNS, "gone", 3*time.Minute)
	// Claimed before it goes: a node may claim an identity only for a pod
	// bound to it, and one deleted within its publisher's pass (it ran
	// half a second) is never claimed.
	c.waitIndexed(reimageNS, "gone", n.name, "gone")
	n.deletePodGracefullyIn(reimageNS, "gone", 2*time.Minute)
	c.waitListed(r)
	node, err := c.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range node.Annotations {
		if strings.Contains(k, "stickyip") {
			t.Fatalf("Node %s carries annotation %s=%q: a re-imaged node takes back from its own NodeRecord only", n.name, k, node.Annotations[k])
		}
	}
	t.Logf("%s: plain pods %s %s %s, db-0 %s (not the first free address %s), gone %s (deleted, reserved); the node's record lists db-0 and gone",
		n.name, r.ips["plain-1"], r.ips["plain-2"], r.ips["plain-3"], r.ips["db-0"], firstPodAddr(n), r.ips["gone"])
	return r
}

// waitListed waits until r's node's record lists db-0 running and gone
// reserved, with their addresses, under its Node's UID.
func (c *cluster) waitListed(r *reimaged) {
	n := r.n
	eventually(c.t, n.name+": db-0 and gone in its record", 2*time.Minute, time.Second, func() (bool, string) {
		rec := c.recordOf(n.name)
		if rec == nil || rec.Spec.NodeUID != c.nodeUID(n.name) {
			return false, "no record under the Node's UID"
		}
		es := c.entriesOf(n.name)
		db, ok1 := es[reimageNS+"/db-0"]
		gone, ok2 := es[reimageNS+"/gone"]
		ok := ok1 && ok2 && db.Running() && !gone.Running() && strings.Join(db.Addresses, ",") == r.ips["db-0"] &&
			strings.Join(gone.Addresses, ",") == r.ips["gone"]
		return ok, fmt.Sprintf("db-0 %+v, gone %+v", db, gone)
	})
}

// reimageRound re-images r's node (with the API server away at its start
// when apiAway) and checks what users must see once it is back.
func (c *cluster) reimageRound(r *reimaged, apiAway bool) {
	t, n := c.t, r.n
	ctx := context.Background()
	how := "API server up"
	if apiAway {
		how = "API server away at the node's start"
	}
	dbUID := c.podUID(reimageNS, "db-0")
	n.powerOff()
	n.wipeStickyip()
	// Meanwhile, through the API: the node's pods of this step are deleted
	// (the kubelet is gone: at once); the StatefulSet creates db-0 again,
	// which waits for the node (placement required).
	for _, name := range c.podsOn(n, reimageNS) {
		n.deletePodNowIn(reimageNS, name)
	}
	eventually(t, "db-0 created again, for "+n.name, 2*time.Minute, time.Second, func() (bool, string) {
		p, err := c.client.CoreV1().Pods(reimageNS).Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return string(p.UID) != dbUID, fmt.Sprintf("uid %s node %q", p.UID, p.Spec.NodeName)
	})
	if e, ok := c.entriesOf(n.name)[reimageNS+"/db-0"]; !ok || strings.Join(e.Addresses, ",") != r.ips["db-0"] {
		t.Fatalf("%s re-imaged: its record lists db-0 as %+v (%t), want %s", n.name, e, ok, r.ips["db-0"])
	}
	if apiAway {
		// The control plane away, stickyip-controller with it (it ends its
		// term when it cannot renew its Lease; its Deployment restarts it).
		c.stopPlacementController()
		c.stopAPIServer()
	}
	start := time.Now()
	n.powerOn()
	if apiAway {
		c.whileAwayAtStart(r)
		start = time.Now()
		c.startControlPlane()
		c.startPlacementController()
	}
	ip := n.waitPodRunningIn(reimageNS, "db-0", 4*time.Minute)
	took := time.Since(start)
	if ip != r.ips["db-0"] {
		t.Fatalf("%s re-imaged (%s): db-0 came back with %s, want its %s", n.name, how, ip, r.ips["db-0"])
	}
	from := "the node's start"
	if apiAway {
		from = "the API server's start"
	}
	t.Logf("FIGURE re-imaged node (%s): db-0 running on %s with its %s %.1f s after %s", how, n.name, ip, took.Seconds(), from)
	c.createOn(n, reimageNS, "fresh", nil)
	got := n.waitPodRunningIn(reimageNS, "fresh", 3*time.Minute)
	if got == r.ips["db-0"] || got == r.ips["gone"] {
		t.Fatalf("%s re-imaged (%s): a new pod got %s, which the node's record lists", n.name, how, got)
	}
	c.createOn(n, reimageNS, "gone", map[string]string{annReservation: "30"})
	if ip := n.waitPodRunningIn(reimageNS, "gone", 3*time.Minute); ip != r.ips["gone"] {
		t.Fatalf("%s re-imaged (%s): gone re-created got %s, want its reserved %s", n.name, how, ip, r.ips["gone"])
	}
	n.requireDistinct("re-imaged (" + how + "), db-0, gone and a new pod running")
	ev := c.nodeEvent(n.name, rebuild.EventReclaimed)
	if !strings.Contains(ev, "NodeRecord") {
		t.Fatalf("%s re-imaged (%s): the %s Event does not say the store was made from the node's NodeRecord: %q", n.name, how, rebuild.EventReclaimed, ev)
	}
	t.Logf("%s re-imaged (%s): a new pod got %s; gone got its %s back; Event: %s", n.name, how, got, r.ips["gone"], ev)
	c.kubectl("delete", "pod", "-n", reimageNS, "fresh", "--wait=true", "--timeout=2m")
	n.deletePodGracefullyIn(reimageNS, "gone", 2*time.Minute)
	c.waitListed(r)
}

// whileAwayAtStart checks the re-imaged node while the API server is away:
// checkpointd holds a new store back until it can read the node's entries
// (the wait file, its gauge), an ADD is refused (error 11, saying why), and
// nothing made a store.
func (c *cluster) whileAwayAtStart(r *reimaged) {
	t, n := c.t, r.n
	eventually(t, n.name+": a new store held back while the API server is away", time.Minute, time.Second, func() (bool, string) {
		w, ok := boltstore.New(n.stickyipDataDir(), time.Second).NewStoreWait()
		v := n.metricInt("checkpointd_ipam_store_reclaim_waiting")
		return ok && w.Holds(time.Now()) && v == 1, fmt.Sprintf("wait %+v %t, checkpointd_ipam_store_reclaim_waiting %d", w, ok, v)
	})
	// checkpointd has its chances to act with the API server away (its
	// passes run, each asking for the record): nothing changes.
	n.waitPasses(3, "with the API server away at the node's start")
	// An ADD (a static pod's, delegated by flannel once it has a lease: the
	// IPAM config flannel hands over, its range the node's subnet) is
	// refused with error 11 saying why.
	conf := fmt.Appendf(nil, `{"cniVersion":"0.3.1","name":"cbr0","ipam":{"type":"stickyip","dataDir":%q,"hostLocalDataDir":"","ranges":[[{"subnet":%q}]]}}`,
		n.stickyipDataDir(), netip.MustParsePrefix(n.subnet).Masked().String())
	o := (&harness.Plugin{Path: filepath.Join(n.bins.project, "stickyip"), Netns: n.ns}).CNI(harness.CNICall{Command: "ADD", ContainerID: "reimage-static",
		Netns: "/proc/self/ns/net", IfName: "eth0", Args: "K8S_POD_NAMESPACE=" + reimageNS + ";K8S_POD_NAME=static-" + n.name, Stdin: conf})
	if o.Err == nil || o.Err.Code != 11 || !strings.Contains(o.Err.Msg, "checkpointd has not yet read this node's placement entries") {
		t.Fatalf("%s: an ADD while the new store is held back: %s, want error 11 saying it waits for checkpointd", n.name, o.Describe())
	}
	t.Logf("%s: an ADD while the new store is held back: error %d %q", n.name, o.Err.Code, o.Err.Msg)
	w, _ := boltstore.New(n.stickyipDataDir(), time.Second).NewStoreWait()
	if _, err := os.Stat(filepath.Join(n.stickyipDataDir(), boltstore.DBFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: a store exists while the API server is away: %v", n.name, err)
	}
	t.Logf("%s started with the API server away: no store, a new one held back until %s (%s)", n.name, w.Until.UTC().Format(time.RFC3339), w.By)
}

// wipeStickyip removes what a re-image takes of stickyip, checkpointd, the
// runtime's CNI state and flannel's from the node's disk: the contents of
// each directory (they stay: the node's mounts are bound to them).
func (n *node) wipeStickyip() {
	t := n.t
	t.Helper()
	for _, dir := range []string{n.stickyipDataDir(), n.checkpointDir(), filepath.Join(n.dir, "var-lib-stickyip"),
		filepath.Join(n.dir, "cni-results"), n.cniConfDir(), filepath.Join(n.dir, "host-local"), filepath.Join(n.dir, "flannel", "data")} {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%s re-imaged: stickyip's data directory, checkpointd's directories, the CNI result cache, the conflist, host-local's and flannel's state wiped", n.name)
}

// createOn creates pod name of ns bound to n.
func (c *cluster) createOn(n *node, ns, name string, ann map[string]string) {
	p := testPod(name, ann)
	p.Namespace, p.Spec.NodeName = ns, n.name
	if _, err := c.client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
}

// podsOn names the pods of ns bound to n.
func (c *cluster) podsOn(n *node, ns string) []string {
	pods, err := c.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name)
	}
	return out
}

// firstPodAddr is the first address a new store hands out on n: the one
// after the gateway of its flannel subnet.
func firstPodAddr(n *node) string {
	return netip.MustParsePrefix(n.subnet).Masked().Addr().Next().Next().String()
}

// refreshWorkloads records the workloads' pods on n as they run after its
// re-image (restarted with the node: the Node deletion compares the
// remaining node's pods with these).
func (c *cluster) refreshWorkloads(w *workloadsRun, n *node) {
	if w == nil {
		return
	}
	ctx := context.Background()
	for app, pods := range map[string]map[string]placedPod{"web": w.web, "db": w.db} {
		before, ok := pods[n.name]
		if !ok {
			continue
		}
		eventually(c.t, "workload pod "+before.Name+" Ready again on "+n.name, 3*time.Minute, time.Second, func() (bool, string) {
			p, err := c.client.CoreV1().Pods(w.ns).Get(ctx, before.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err != nil {
				return false, fmt.Sprint(err)
			}
			if !podReady(p) || p.Status.PodIP == "" {
				return false, fmt.Sprintf("phase %s ready %t", p.Status.Phase, podReady(p))
			}
			pods[n.name] = placedPod{Name: p.Name, Node: n.name, IP: p.Status.PodIP, UID: string(p.UID)}
			return true, ""
		})
		c.t.Logf("workload pod %s on re-imaged %s: %s before, %s after", before.Name, n.name, before.IP, pods[n.name].IP)
		if app == "db" && pods[n.name].IP != before.IP {
			c.t.Fatalf("the StatefulSet pod %s (a reservation duration) restarted on re-imaged %s with %s, not its %s", before.Name, n.name, pods[n.name].IP, before.IP)
		}
	}
}
