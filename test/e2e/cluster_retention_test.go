//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
)

const (
	// retentionNamespace holds the step's StatefulSets; retentionKeep is
	// their pods' reservation, shorter than the step holds them scaled
	// down; retentionStatefulSets is how many StatefulSets the cluster
	// holds while the nodes' API requests are counted.
	retentionNamespace    = "retain"
	retentionKeep         = 20 * time.Second
	retentionStatefulSets = 100
)

// retention is issue 51 on the two-node cluster (a step of TestCluster,
// after placement: deploy/placement's RBAC lets every node's checkpointd
// watch the cluster's StatefulSets):
//
//  0. 100 StatefulSets (no replicas) created in a namespace of their own;
//     each node's StatefulSet requests are counted from the API server's
//     audit log over the whole step: none for the 100 (they arrive over
//     the watch each node holds), and one watch for the node whose
//     checkpointd is restarted in the step (the API cost of following
//     the workload: O(1) per node).
//  1. whenScaled Retain (the Kubernetes default): StatefulSet db of 3,
//     pods with a 20 s reservation and stickyip.io/placement: required,
//     scaled to 1 and held there 3 times the reservation (db-2's node's
//     checkpointd restarted meanwhile): `stickyip gc` on
//     each node then drops a plain pod's reservation of the same 20 s,
//     deleted at the same time, and keeps db-1's and db-2's, their index
//     entries counting; `stickyip list` says they follow StatefulSet db.
//     Scaled back to 3: the same three addresses, each on its node.
//  2. whenScaled Delete: StatefulSet dd of 3 (a 10-minute reservation)
//     scaled to 1: dd-1's and dd-2's addresses free within seconds of
//     their pods' deletion, and a new pod asking for one of them
//     (stickyip.io/ips) gets it.
//  3. whenDeleted Delete: dd deleted: dd-0's address free at once.
func (c *cluster) retention() {
	t := c.t
	ctx := context.Background()
	start := time.Now()
	for _, ns := range []string{retentionNamespace, "many"} {
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.waitDefaultServiceAccount(retentionNamespace)

	// 0. The StatefulSets of a busy cluster, none of them on these nodes.
	zero := int32(0)
	for i := range retentionStatefulSets {
		s := statefulSetOf("many", fmt.Sprintf("s%03d", i), zero, stickyPodTemplate(fmt.Sprintf("s%03d", i), nil), nil)
		if _, err := c.client.AppsV1().StatefulSets("many").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	created := time.Now()
	t.Logf("%d StatefulSets created in namespace many in %s", retentionStatefulSets, created.Sub(start).Round(100*time.Millisecond))

	// 1. whenScaled Retain.
	sticky := map[string]string{annReservation: retentionKeep.String(), annPlacement: contract.PlacementRequired}
	if _, err := c.client.AppsV1().StatefulSets(retentionNamespace).Create(ctx,
		statefulSetOf(retentionNamespace, "db", 3, stickyPodTemplate("db", sticky), nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := c.waitMembers(retentionNamespace, "db", 3)
	for _, m := range first {
		c.waitFollowed(m, "db", "Retain")
	}
	t.Logf("StatefulSet db (whenScaled Retain, a %s reservation): %s", retentionKeep, describeMembers(first))
	control := testPod("plain", map[string]string{annReservation: retentionKeep.String()})
	control.Namespace, control.Spec.NodeName = retentionNamespace, first["db-2"].Node
	if _, err := c.client.CoreV1().Pods(retentionNamespace).Create(ctx, control, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controlIP := c.node(control.Spec.NodeName).waitPodRunningIn(retentionNamespace, "plain", 2*time.Minute)
	c.scale(retentionNamespace, "db", 1)
	c.deletePod(retentionNamespace, "plain")
	gone := c.waitPodsGone(retentionNamespace, "db-1", "db-2", "plain")
	for _, name := range []string{"db-1", "db-2"} {
		m := first[name]
		e := c.waitEntry(m.Node, m.IP, "db-1 or db-2 reserved", func(e admin.Entry) bool { return e.State == "reserved" })
		if e.Retention != "statefulset" || e.ExpiresAt != nil || !strings.HasPrefix(e.Keep, "while StatefulSet db retains it (whenScaled: Retain") {
			t.Fatalf("%s's reservation on %s: %+v; want it kept while StatefulSet db retains it, with no end", name, m.Node, e)
		}
	}
	// checkpointd restarted on db-2's node (it lists the StatefulSets
	// anew, 100 more than before): db-2 stays held.
	restarted := c.node(first["db-2"].Node)
	restartedAt := time.Now()
	restarted.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
	restarted.startCheckpointd()
	hold := 3 * retentionKeep
	time.Sleep(time.Until(gone.Add(hold)))
	for _, n := range c.nodes {
		n.stickyipTool("gc")
	}
	if e, ok := c.entry(control.Spec.NodeName, controlIP); ok {
		t.Fatalf("the plain pod's %s reservation %s after it (and stickyip gc): %+v; the control proves nothing", retentionKeep, hold, e)
	}
	for _, name := range []string{"db-1", "db-2"} {
		m := first[name]
		e, ok := c.entry(m.Node, m.IP)
		if !ok || e.State != "reserved" || e.Name != name || e.DurationEndsAt == nil || time.Since(*e.DurationEndsAt) < retentionKeep {
			t.Fatalf("%s on %s %s after the scale-down (its own %s long over), stickyip gc run: %+v (listed %v); want still reserved",
				name, m.Node, hold, retentionKeep, e, ok)
		}
		if e, ok := c.entriesOf(m.Node)[retentionNamespace+"/"+name]; !ok || !e.Held || c.hinted(retentionNamespace, name) != m.Node {
			t.Fatalf("%s's entry in %s's record: %+v (%v), index %q; want it held and counting", name, m.Node, e, ok, c.hinted(retentionNamespace, name))
		}
		t.Logf("%s on %s, %s after the scale-down: %s, %s; `stickyip list`: %s", name, m.Node, time.Since(gone).Round(time.Second), e.IP, e.State, e.Keep)
	}
	t.Logf("control: the plain pod's %s reservation of %s on %s dropped by stickyip gc", retentionKeep, controlIP, control.Spec.NodeName)
	c.scale(retentionNamespace, "db", 3)
	back := c.waitMembers(retentionNamespace, "db", 3)
	for name, m := range first {
		if back[name].Node != m.Node || back[name].IP != m.IP {
			t.Fatalf("scaled back to 3: %s runs on %s with %s, want %s with %s (%s)", name, back[name].Node, back[name].IP, m.Node, m.IP, describeMembers(back))
		}
		if name != "db-0" { // db-0 ran throughout
			c.requireHinted(retentionNamespace, name, m.Node, true)
		}
	}
	t.Logf("scaled back to 3 after %s at 1: the same three addresses on the same nodes: %s", time.Since(gone).Round(time.Second), describeMembers(back))
	c.remove(retentionNamespace, "statefulset", "db")
	for _, name := range []string{"db-0", "db-1", "db-2"} {
		c.node(first[name].Node).stickyipRelease(retentionNamespace + "/" + name)
	}

	// 2. whenScaled Delete.
	deleteBoth := &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
	if _, err := c.client.AppsV1().StatefulSets(retentionNamespace).Create(ctx,
		statefulSetOf(retentionNamespace, "dd", 3, stickyPodTemplate("dd", map[string]string{annReservation: "10m", annPlacement: contract.PlacementRequired}), deleteBoth),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dd := c.waitMembers(retentionNamespace, "dd", 3)
	for _, m := range dd {
		c.waitFollowed(m, "dd", "Delete")
	}
	t.Logf("StatefulSet dd (whenScaled Delete, whenDeleted Delete, a 10-minute reservation): %s", describeMembers(dd))
	c.scale(retentionNamespace, "dd", 1)
	gone = c.waitPodsGone(retentionNamespace, "dd-1", "dd-2")
	for _, name := range []string{"dd-1", "dd-2"} {
		m := dd[name]
		c.waitNoEntry(m.Node, m.IP, name+"'s address free after the scale-down", 30*time.Second)
		t.Logf("%s's %s on %s free %s after its pod's deletion (whenScaled Delete)", name, m.IP, m.Node, time.Since(gone).Round(100*time.Millisecond))
		c.waitNoLine(retentionNamespace, name, m.Node)
	}
	taker := testPod("taker", map[string]string{contract.AnnotationIPs: dd["dd-2"].IP})
	taker.Namespace, taker.Spec.NodeName = retentionNamespace, dd["dd-2"].Node
	if _, err := c.client.CoreV1().Pods(retentionNamespace).Create(ctx, taker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := c.node(taker.Spec.NodeName).waitPodRunningIn(retentionNamespace, "taker", 2*time.Minute); got != dd["dd-2"].IP {
		t.Fatalf("a new pod asking for dd-2's released %s got %s", dd["dd-2"].IP, got)
	}
	t.Logf("a new pod asking for dd-2's released %s on %s got it", dd["dd-2"].IP, taker.Spec.NodeName)
	c.deletePod(retentionNamespace, "taker")

	// 3. whenDeleted Delete.
	if err := c.client.AppsV1().StatefulSets(retentionNamespace).Delete(ctx, "dd", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gone = c.waitPodsGone(retentionNamespace, "dd-0")
	m := dd["dd-0"]
	c.waitNoEntry(m.Node, m.IP, "dd-0's address free after the StatefulSet's deletion", 30*time.Second)
	t.Logf("StatefulSet dd deleted: dd-0's %s on %s free %s after its pod's deletion (whenDeleted Delete)", m.IP, m.Node, time.Since(gone).Round(100*time.Millisecond))
	c.waitNoLine(retentionNamespace, "dd-0", m.Node)

	// 0. The API cost, over the whole step.
	end := time.Now()
	total, err := c.client.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		all := n.statefulSetRequests(start, end)
		during := n.statefulSetRequests(start, created.Add(5*time.Second))
		t.Logf("%s: StatefulSet requests in this step (%s, %d StatefulSets in the cluster): %v; while the %d were created: %v",
			n.name, end.Sub(start).Round(time.Second), len(total.Items), all, retentionStatefulSets, during)
		if sum(all) > 2 || all["get"] != 0 || sum(during) > 1 {
			t.Errorf("%s made %v StatefulSet requests in the step, %v while %d StatefulSets were created: want one watch (and at most its renewal), no get",
				n.name, all, during, retentionStatefulSets)
		}
	}
	if got := restarted.statefulSetRequests(restartedAt, end); sum(got) < 1 || sum(got) > 2 || got["get"] != 0 {
		t.Errorf("%s's checkpointd, restarted with %d StatefulSets in the cluster, made %v StatefulSet requests: want its one watch (and its list, on a server without streaming lists)",
			restarted.name, len(total.Items), got)
	} else {
		t.Logf("%s's checkpointd restarted with %d StatefulSets in the cluster: %v StatefulSet requests until the step's end", restarted.name, len(total.Items), got)
	}
	c.kubectl("delete", "namespace", retentionNamespace, "many", "--wait=true", "--timeout=3m")
}

// statefulSetOf is a StatefulSet of replicas pods of tmpl (in parallel),
// with a PVC retention policy (nil: none, Retain).
func statefulSetOf(ns, name string, replicas int32, tmpl corev1.PodTemplateSpec, policy *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:                             &replicas,
			Selector:                             &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template:                             tmpl,
			PodManagementPolicy:                  appsv1.ParallelPodManagement,
			PersistentVolumeClaimRetentionPolicy: policy,
		},
	}
}

// scale sets StatefulSet ns/name's replicas, as kubectl scale does.
func (c *cluster) scale(ns, name string, replicas int) {
	c.t.Helper()
	c.kubectl("scale", "-n", ns, "statefulset", name, fmt.Sprintf("--replicas=%d", replicas))
}

// waitMembers waits until StatefulSet name's pods name-0 … name-(n-1) run
// Ready, each with an address its node's runtime reports, and returns them
// by pod name.
func (c *cluster) waitMembers(ns, name string, n int) map[string]placedPod {
	t := c.t
	t.Helper()
	var out map[string]placedPod
	eventually(t, fmt.Sprintf("%d pods of StatefulSet %s/%s Ready", n, ns, name), 3*time.Minute, time.Second, func() (bool, string) {
		pods, err := c.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		got := map[string]placedPod{}
		for _, p := range pods.Items {
			pp, ok, why := c.placed(context.Background(), &p)
			if !ok {
				return false, why
			}
			got[p.Name] = pp
		}
		for i := range n {
			if _, ok := got[fmt.Sprintf("%s-%d", name, i)]; !ok {
				return false, fmt.Sprintf("pods %v", describeMembers(got))
			}
		}
		out = got
		return len(got) == n, fmt.Sprintf("pods %v", describeMembers(got))
	})
	return out
}

func describeMembers(ms map[string]placedPod) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(ms)) {
		out = append(out, fmt.Sprintf("%s on %s with %s", name, ms[name].Node, ms[name].IP))
	}
	return strings.Join(out, ", ")
}

// waitFollowed waits until m's node records that m's reservation follows
// StatefulSet set with whenScaled (checkpointd saw the pod and its
// StatefulSet), and its index entry is published.
func (c *cluster) waitFollowed(m placedPod, set, whenScaled string) {
	t := c.t
	t.Helper()
	c.waitEntry(m.Node, m.IP, m.Name+" follows StatefulSet "+set, func(e admin.Entry) bool {
		return e.State == "allocated" && e.StatefulSet != nil && e.StatefulSet.Name == set && e.StatefulSet.UID != "" &&
			strings.Contains(e.StatefulSet.Why, whenScaled)
	})
	eventually(t, m.Name+"'s entry published", time.Minute, 500*time.Millisecond, func() (bool, string) {
		e, ok := c.entriesOf(m.Node)[retentionNamespace+"/"+m.Name]
		return ok && e.Running(), fmt.Sprintf("%+v", e)
	})
}

// entry returns node's `stickyip list --json` entry of ip.
func (c *cluster) entry(node, ip string) (admin.Entry, bool) {
	n := c.node(node)
	for _, e := range n.stickyipList(c.t) {
		if e.IP == ip {
			return e, true
		}
	}
	return admin.Entry{}, false
}

// waitEntry waits until node lists ip as ok says, and returns the entry.
func (c *cluster) waitEntry(node, ip, what string, ok func(admin.Entry) bool) admin.Entry {
	c.t.Helper()
	var e admin.Entry
	eventually(c.t, what, time.Minute, 500*time.Millisecond, func() (bool, string) {
		var listed bool
		e, listed = c.entry(node, ip)
		return listed && ok(e), fmt.Sprintf("%s's entry of %s: %+v (listed %v)", node, ip, e, listed)
	})
	return e
}

// waitNoEntry waits until node lists nothing on ip.
func (c *cluster) waitNoEntry(node, ip, what string, timeout time.Duration) {
	c.t.Helper()
	eventually(c.t, what, timeout, 200*time.Millisecond, func() (bool, string) {
		e, listed := c.entry(node, ip)
		return !listed, fmt.Sprintf("%s's entry of %s: %+v", node, ip, e)
	})
}

// waitNoLine waits until node's index entry of identity is released.
func (c *cluster) waitNoLine(ns, identity, node string) {
	c.t.Helper()
	eventually(c.t, node+" releases its entry of "+ns+"/"+identity, time.Minute, 500*time.Millisecond, func() (bool, string) {
		e, ok := c.entriesOf(node)[ns+"/"+identity]
		return !ok, fmt.Sprintf("%+v", e)
	})
}

// waitPodsGone waits until the pods are gone from the API and returns when.
func (c *cluster) waitPodsGone(ns string, names ...string) time.Time {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("pods %v of %s gone", names, ns), 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		for _, name := range names {
			if _, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, name + " still there"
			}
		}
		return true, ""
	})
	return time.Now()
}

// stickyipTool runs the operator tool with args on the node, in its mount
// namespace (the default paths are the node's own).
func (n *node) stickyipTool(args ...string) string {
	n.t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--mount=" + n.mnt.Path, "--net=" + n.ns.Path,
		filepath.Join(n.bins.project, "stickyip")}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: stickyip %v: %v\n%s", n.name, args, err, out)
	}
	return string(out)
}

// statefulSetRequests counts, by verb, the StatefulSet requests node n's
// checkpointd made between from and to, from the API server's audit log.
func (n *node) statefulSetRequests(from, to time.Time) map[string]int {
	return n.checkpointdRequests(n.name, "statefulsets", from, to)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
