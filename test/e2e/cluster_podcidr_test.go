//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
)

// TestClusterPodCIDRChange is a node whose pod subnet changes, on
// real flanneld: a Node deleted and registered again gets another podCIDR,
// flanneld gets another lease when it restarts, and in between nothing
// hands out, keeps or publishes an address of the old subnet.
func TestClusterPodCIDRChange(t *testing.T) {
	c := newFlannelCluster(t, "stickyip")
	c.useStickyip()
	c.applyPlacement()
	c.ensurePlacementController() // it alone writes the index the scenario reads
	c.podCIDRChange()
}

// podCIDRChange runs the scenario on a real-flannel cluster with stickyip
// and deploy/placement in place; node1 is registered again:
//
//  1. StatefulSet db's pod db-0 (a 10-minute reservation) runs on node1
//     with an address of its podCIDR A and is published there; the
//     StatefulSet scaled to 0 leaves the reservation and its entry.
//  2. flanneld on node1 is cut from the API server (its in-cluster
//     Service address dropped in node1's netns; the kubelet and checkpointd
//     reach the API server directly), so the new lease waits: the window
//     between the Node's new podCIDR and flanneld's new subnet.env.
//  3. node1's kubelet stops, its Node is deleted (the garbage collector
//     drops node1's owner reference: db-0's entry stops counting at once)
//     and the kubelet registers the Node again, with podCIDR B ≠ A.
//  4. checkpointd (still running) records B: `stickyip status` names A as
//     no longer the node's, a PodCIDRChanged Event on the Node names db-0's
//     dropped address, the index holds no entry of node1 for db-0.
//  5. A pod started on node1 in the window gets no address: its sandbox
//     fails with stickyip's try-again error naming the range, again and
//     again, and no address of A is allocated.
//  6. flanneld, restarted once it can reach the API server again (it reads
//     the podCIDR only when it starts), writes the lease of B; cni0, which
//     the bridge plugin does not re-address, is removed as an operator does
//     after such a change without a reboot: the waiting pod runs with an
//     address of B.
//  7. db-0, re-created while a CPU-hungry pod makes node2 the scheduler's
//     own choice, goes to node2: nothing pulls it back to node1 and A.
func (c *cluster) podCIDRChange() {
	t := c.t
	t.Helper()
	ctx := context.Background()
	n1, n2 := c.node("node1"), c.node("node2")
	const ns = "moving"
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(ns)
	oldCIDR, err := n1.podCIDR()
	if err != nil {
		t.Fatal(err)
	}

	// 1. db-0 on node1 (node2 cordoned while it is scheduled).
	c.kubectl("cordon", n2.name)
	c.createStickyDB(ns)
	first := c.waitSticky(ns, "app=db", "", 3*time.Minute)
	c.kubectl("uncordon", n2.name)
	if first.Node != n1.name || !oldCIDR.Contains(netip.MustParseAddr(first.IP)) {
		t.Fatalf("db-0 runs on %s with %s, want node1 with an address of %s", first.Node, first.IP, oldCIDR)
	}
	c.waitIndexed(ns, "db-0", n1.name, "db-0")
	c.kubectl("-n", ns, "scale", "statefulset/db", "--replicas=0")
	eventually(t, "db-0 gone", 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		_, err := c.client.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if r := reservationOf(n1.stickyipList(t), ns+"/db-0"); r == nil || r.IP != first.IP {
		t.Fatalf("db-0's reservation on node1: %+v, want %s", r, first.IP)
	}
	c.waitIndexed(ns, "db-0", n1.name, "db-0")
	t.Logf("db-0 ran on node1 with %s (podCIDR %s); deleted, its address reserved and its entry published", first.IP, oldCIDR)

	// 2. flanneld on node1 cannot reach the API server.
	svc, err := c.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rule := []string{"OUTPUT", "-d", svc.Spec.ClusterIP + "/32", "-p", "tcp", "-j", "DROP"}
	n1.iptables(append([]string{"-t", "raw", "-I"}, rule...)...)
	unblocked := false
	unblock := func() {
		if !unblocked {
			unblocked = true
			n1.iptables(append([]string{"-t", "raw", "-D"}, rule...)...)
		}
	}
	t.Cleanup(unblock)

	// 3. node1 registered again.
	n1.kubelet.stop(t, syscall.SIGTERM, 30*time.Second)
	oldNode, err := c.client.CoreV1().Nodes().Get(ctx, n1.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.client.CoreV1().Nodes().Delete(ctx, n1.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	eventually(t, "db-0's entry no longer counts", time.Minute, 500*time.Millisecond, func() (bool, string) {
		h := c.hinted(ns, "db-0")
		return h == "", "the index names " + h
	})
	t.Logf("Node node1 deleted: db-0's entry stopped counting %s later (owner reference collected)", time.Since(deleted).Round(100*time.Millisecond))
	n1.startKubelet(false)
	var newCIDR netip.Prefix
	eventually(t, "node1 registered again with a podCIDR", 2*time.Minute, time.Second, func() (bool, string) {
		no, err := c.client.CoreV1().Nodes().Get(ctx, n1.name, metav1.GetOptions{})
		if err != nil || no.UID == oldNode.UID || no.Spec.PodCIDR == "" {
			return false, fmt.Sprint("Node ", err)
		}
		newCIDR, err = netip.ParsePrefix(no.Spec.PodCIDR)
		return err == nil, fmt.Sprint(err)
	})
	if newCIDR == oldCIDR {
		t.Fatalf("node1 registered again got its old podCIDR %s back: the scenario needs another one", oldCIDR)
	}
	if l, err := n1.lease(); err != nil || !oldCIDR.Contains(l.Subnet.Addr()) {
		t.Fatalf("node1's subnet.env after the registration: %+v %v; want flanneld's old lease (it cannot reach the API server)", l, err)
	}
	t.Logf("node1 registered again %s after its deletion with podCIDR %s (was %s); subnet.env still has the old lease",
		time.Since(deleted).Round(100*time.Millisecond), newCIDR, oldCIDR)

	// 4. checkpointd records it.
	eventually(t, "checkpointd on node1 records the new pod CIDR", time.Minute, time.Second, func() (bool, string) {
		return n1.metricsAre(map[string]string{"checkpointd_node_pod_cidr_changes_total": "1"})
	})
	status := n1.stickyipStatus()
	if len(status) != 1 || status[0].NodeRanges == nil || fmt.Sprint(status[0].NodeRanges.Retired) != fmt.Sprintf("[%s]", oldCIDR) ||
		fmt.Sprint(status[0].NodeRanges.Current) != fmt.Sprintf("[%s]", newCIDR) {
		t.Fatalf("stickyip status on node1: %+v, want %s current and %s retired", status, newCIDR, oldCIDR)
	}
	if r := reservationOf(n1.stickyipList(t), ns+"/db-0"); r != nil {
		t.Errorf("db-0's reservation of the old range is still there: %+v", r)
	}
	ev := c.nodeEvent(n1.name, "PodCIDRChanged")
	if !strings.Contains(ev, first.IP+" "+ns+"/db-0") || !strings.Contains(ev, newCIDR.String()) {
		t.Errorf("PodCIDRChanged event %q does not name db-0's address %s and the new range", ev, first.IP)
	}
	eventually(t, "no entry of node1 for db-0", time.Minute, time.Second, func() (bool, string) {
		e, ok := c.entriesOf(n1.name)[ns+"/db-0"]
		return !ok, fmt.Sprintf("entry %+v", e)
	})
	t.Logf("checkpointd: %s retired, db-0's reservation dropped, its entry released; event: %s", oldCIDR, ev)

	// 5. A pod started in the window.
	p := testPod("between", nil)
	p.Namespace, p.Spec.NodeName = ns, n1.name
	if _, err := c.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod's sandbox refused twice for the old range", 2*time.Minute, time.Second, func() (bool, string) {
		var failed int32
		for _, e := range n1.eventList(ctx, ns, "involvedObject.name=between") {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "is no longer the node's") {
				failed += max(e.Count, 1)
			}
		}
		return failed >= 2, fmt.Sprintf("%d refusals", failed)
	})
	for _, e := range n1.stickyipList(t) {
		if oldCIDR.Contains(netip.MustParseAddr(e.IP)) && e.Namespace+"/"+e.Name == ns+"/between" {
			t.Fatalf("a pod started in the window got %s of the old range", e.IP)
		}
	}
	if got, _ := c.client.CoreV1().Pods(ns).Get(ctx, "between", metav1.GetOptions{}); got.Status.PodIP != "" {
		t.Fatalf("a pod started in the window runs with %s", got.Status.PodIP)
	}
	t.Log("a pod started in the window gets no address: its sandbox fails with stickyip's try-again error, and is retried")

	// 6. flanneld's new lease: flanneld reads the Node's podCIDR when it
	// starts (AcquireLease), and the one running kept its pod (the pod
	// garbage collector waits 40 s before it deletes the pods of a Node that
	// is gone, and node1 was back in 2): it is restarted, as an operator
	// does (or the reboot of a replaced machine), once it can reach the API
	// server again.
	unblock()
	leased := time.Now()
	c.kubectl("-n", flannelNamespace, "delete", "pod", c.flannelPod(n1).Name, "--wait=false")
	l := n1.waitLease(5 * time.Minute)
	n1.subnet = l.Subnet.String()
	// The bridge plugin never changes the address of an existing bridge
	// ("cni0 already has an IP address different from ..."): without a
	// reboot the operator removes cni0 once no pod uses it (docs/install.md).
	run(t, "ip", "-n", n1.ns.Name, "link", "delete", "cni0")
	ip := n1.waitPodRunningIn(ns, "between", 3*time.Minute)
	if !newCIDR.Contains(netip.MustParseAddr(ip)) {
		t.Fatalf("the pod started in the window runs with %s, not an address of %s", ip, newCIDR)
	}
	t.Logf("flanneld, restarted, wrote the lease of %s %s later; the waiting pod runs with %s",
		l.Subnet, time.Since(leased).Round(100*time.Millisecond), ip)

	// 7. db-0 re-created: nothing sends it back to node1.
	steer := c.steerPod(ns, n1.name)
	c.kubectl("-n", ns, "scale", "statefulset/db", "--replicas=1")
	again := c.waitSticky(ns, "app=db", first.UID, 3*time.Minute)
	if again.Node != n2.name {
		t.Errorf("db-0 re-created runs on %s with %s; want node2, the scheduler's own choice (node1 holds nothing of it)", again.Node, again.IP)
	}
	for _, n := range c.nodes {
		for key, e := range c.entriesOf(n.name) {
			for _, a := range e.Addresses {
				if oldCIDR.Contains(netip.MustParseAddr(a)) {
					t.Errorf("%s's record: its entry of %s names %s of the old range %s", n.name, key, a, oldCIDR)
				}
			}
		}
	}
	t.Logf("db-0 re-created with %s/%s busy: runs on %s with %s; no entry names an address of %s", ns, steer, again.Node, again.IP, oldCIDR)
	c.remove(ns, "pod", steer)
}

// iptables runs iptables with args in the node's network namespace.
func (n *node) iptables(args ...string) {
	n.t.Helper()
	run(n.t, append([]string{"ip", "netns", "exec", n.ns.Name, "iptables"}, args...)...)
}

// stickyipStatus runs `stickyip status --json` on the node, in its mount
// namespace (the conflist's paths are the node's own there).
func (n *node) stickyipStatus() []admin.PoolStatus {
	t := n.t
	t.Helper()
	out, err := exec.Command("nsenter", "--mount="+n.mnt.Path, "--net="+n.ns.Path,
		filepath.Join(n.bins.project, "stickyip"), "status", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: stickyip status: %v\n%s", n.name, err, out)
	}
	var pools []admin.PoolStatus
	if err := json.Unmarshal(out, &pools); err != nil {
		t.Fatalf("%s: stickyip status: %v\n%s", n.name, err, out)
	}
	return pools
}

// nodeEvent returns the message of the latest Event of reason on Node
// name, waiting up to a minute for one.
func (c *cluster) nodeEvent(name, reason string) string {
	t := c.t
	t.Helper()
	var msg string
	eventually(t, "a "+reason+" Event on Node "+name, time.Minute, time.Second, func() (bool, string) {
		l, err := c.client.CoreV1().Events("default").List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name + ",reason=" + reason})
		if err != nil || len(l.Items) == 0 {
			return false, fmt.Sprint("none ", err)
		}
		msg = l.Items[len(l.Items)-1].Message
		return true, ""
	})
	return msg
}
