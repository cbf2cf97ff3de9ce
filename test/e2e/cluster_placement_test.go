//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/placement"
)

const (
	// placementDeletes is how often each sticky workload's pod is deleted
	// with the placement policy in force.
	placementDeletes = 10
	// stickyCPU is what a sticky workload's pod requests; steerCPU what
	// the pod that makes the holding node the scheduler's second choice
	// requests there (both nodes' kubelets report the machine's 2 CPUs).
	stickyCPU = "200m"
	steerCPU  = "1"
	// placementBindingName is the MutatingAdmissionPolicyBinding of
	// deploy/placement/placement-policy.yaml.
	placementBindingName = "stickyip-placement"
)

// placement is issues 19 and 25 on the two-node cluster (kube-scheduler,
// kube-controller-manager, each node's kubelet, containerd, CNI chain and
// checkpointd with its placement publisher), with deploy/placement applied
// by kubectl (a step of TestCluster):
//
//  1. A StatefulSet pod (io.kubernetes.cri/reserved-ip-duration) and then a
//     Deployment pod with stickyip.io/identity, each deleted 10 times, come
//     back every time on the node that holds their IP, with that IP, although
//     a CPU-hungry pod on that node makes the other node the scheduler's own
//     choice. Before the deletes, the other node's credentials try to claim
//     the identity for the pod running on the holder, and for a pod that
//     never ran: both refused by the API server, nothing stored, and the
//     deletes show the pod is not pulled.
//  2. The control, on the same cluster: with the policy's binding removed
//     (and the API server confirmed to no longer apply it), one more delete
//     of each moves the pod to the other node and another IP.
//  3. The tie: both nodes now hold the identity (the old node's reservation
//     has not expired); with the policy back, the hint names only the node
//     that ran the pod last, and the next delete brings the pod back there
//     with its newest IP.
//  4. A deleted Node's entries stop counting: TestCluster's last step,
//     nodeDeleted.
//
// It prints delete → Running-with-the-same-IP times and each node's API
// writes per sticky pod lifecycle (counted from the step's start: the
// nodes' checkpointd ran the earlier steps too).
func (c *cluster) placement() *placementRun {
	t := c.t
	ctx := context.Background()
	c.applyPlacement()
	writesBefore := map[string]int{}
	for _, n := range c.nodes {
		c.waitPublisherSettled(n)
		writesBefore[n.name] = n.placementWrites()
	}
	const ns = "sticky"
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(ns)

	one := int32(1)
	// 1a. StatefulSet db: db-0 is its identity.
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: stickyPodTemplate("db", map[string]string{annReservation: "10m"}),
		},
	}
	if _, err := c.client.AppsV1().StatefulSets(ns).Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dbRun := c.stickyRounds(ns, "app=db", "db-0")

	// 1b. Deployment cache: its pods share the identity "cache"; each
	// replacement is created while the old pod still terminates.
	c.remove(ns, "statefulset", "db")
	cache := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
			Template: stickyPodTemplate("cache", map[string]string{annReservation: "10m", annIdentity: "cache"}),
		},
	}
	if _, err := c.client.AppsV1().Deployments(ns).Create(ctx, cache, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cacheRun := c.stickyRounds(ns, "app=cache", "cache")

	// Figures: API writes per sticky pod lifecycle, per node.
	for _, n := range c.nodes {
		var w []string
		for _, kind := range []string{placement.WriteClaim, placement.WriteUpdate, placement.WriteRelease} {
			v, err := n.metric(`checkpointd_placement_writes_total{kind="` + kind + `"}`)
			if err != nil {
				v = "0"
			}
			w = append(w, kind+" "+v)
		}
		total := n.placementWrites() - writesBefore[n.name]
		lifecycles := dbRun.lifecyclesOn[n.name] + cacheRun.lifecyclesOn[n.name]
		t.Logf("%s: placement API writes %d in this step (counters now %v, %d before it) for %d sticky pod lifecycles (ADD to DEL) = %.2f per lifecycle",
			n.name, total, w, writesBefore[n.name], lifecycles, float64(total)/float64(max(lifecycles, 1)))
		if total > 3*lifecycles {
			t.Errorf("%s wrote %d times for %d sticky pod lifecycles: more than 3 per lifecycle", n.name, total, lifecycles)
		}
	}
	return &placementRun{ns: ns, cache: cacheRun}
}

// placementWrites is the sum of the node's checkpointd_placement_writes_total
// counters (a counter not exposed yet counts 0).
func (n *node) placementWrites() int {
	total := 0
	for _, kind := range []string{placement.WriteClaim, placement.WriteUpdate, placement.WriteRelease} {
		v, err := n.metric(`checkpointd_placement_writes_total{kind="` + kind + `"}`)
		if err != nil {
			continue
		}
		k, _ := strconv.Atoi(v)
		total += k
	}
	return total
}

// waitPublisherSettled waits until node n's placement publisher has
// caught up (its write and error counters unchanged for 5 s, five of its
// 1 s passes): once deploy/placement allows it, what the earlier steps'
// sticky pods left is published (or refused, for a deleted pod) before this
// step counts its own writes.
func (c *cluster) waitPublisherSettled(n *node) {
	c.t.Helper()
	last, same := "", 0
	eventually(c.t, n.name+"'s placement publisher settled", time.Minute, time.Second, func() (bool, string) {
		now, err := n.metricLines("checkpointd_placement_writes_total", "checkpointd_placement_errors_total")
		if err != nil {
			return false, err.Error()
		}
		if now == last {
			same++
		} else {
			last, same = now, 0
		}
		return same >= 5, now
	})
}

// placementRun is what the placement step leaves for the Node deletion:
// its namespace and the cache Deployment's rounds.
type placementRun struct {
	ns    string
	cache stickyRun
}

// nodeDeleted is TestCluster's last step: a Node deleted (placement's step
// 4, with the workloads' step 4 when w is not nil).
//
// The node that ran the cache pod last stops (checkpointd, kubelet) and its
// Node is deleted. Placement: the garbage collector drops its owner
// reference from every shard, so its entries no longer count (the hint for
// them is gone), the other node's stay. Workloads: the deleted Node's pods
// leave the API (pod GC), a ConfigMap it owned is garbage-collected, and the
// workloads' pods on the other node keep their UID, IP and readiness.
func (c *cluster) nodeDeleted(p *placementRun, w *workloadsRun) {
	t := c.t
	ctx := context.Background()
	ns := p.ns
	// cache's Deployment goes first (its pod would be re-created on the
	// remaining node, which would claim it anew), and a sticky pod bound to
	// the remaining node gives that node an entry to keep.
	c.remove(ns, "deployment", "cache")
	gone := c.node(p.cache.other) // ran the cache pod last: holds its entry
	stay := c.node(p.cache.holder)
	keep := testPod("keep", map[string]string{annReservation: "10m"})
	keep.Namespace, keep.Spec.NodeName = ns, stay.name
	if _, err := c.client.CoreV1().Pods(ns).Create(ctx, keep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stay.waitPodRunningIn(ns, "keep", 2*time.Minute)
	eventually(t, stay.name+" publishes "+ns+"/keep", time.Minute, 500*time.Millisecond, func() (bool, string) {
		h, ok := c.holdOf(ns, "keep")
		return ok && h.Node == stay.name, fmt.Sprintf("entry %+v", h)
	})
	goneHeld, stayHeld := c.heldBy(gone.name), c.heldBy(stay.name)
	// The earlier steps' sticky pods have entries too: this step's own
	// must be among them.
	if _, ok := goneHeld[ns+"/cache"]; !ok {
		t.Fatalf("entries before the Node's deletion: %s %v, want %s/cache among them", gone.name, goneHeld, ns)
	}
	if _, ok := stayHeld[ns+"/keep"]; !ok {
		t.Fatalf("entries before the Node's deletion: %s %v, want %s/keep among them", stay.name, stayHeld, ns)
	}
	if w != nil {
		w.ownByNode(c, gone)
	}
	gone.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
	gone.kubelet.stop(t, syscall.SIGTERM, 30*time.Second)
	deleted := time.Now()
	if err := c.client.CoreV1().Nodes().Delete(ctx, gone.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "shards no longer owned by deleted Node "+gone.name, 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		held := c.heldBy(gone.name)
		for _, owned := range held {
			if owned {
				return false, fmt.Sprintf("%s still owns the shards of %v", gone.name, held)
			}
		}
		return true, ""
	})
	t.Logf("Node %s deleted → its owner references garbage-collected in %s; its entries %v no longer count",
		gone.name, time.Since(deleted).Round(100*time.Millisecond), slices.Sorted(maps.Keys(goneHeld)))
	for key := range goneHeld {
		kns, id, _ := strings.Cut(key, "/")
		c.waitHint(kns, id, nil)
	}
	if held := c.heldBy(stay.name); fmt.Sprint(held) != fmt.Sprint(stayHeld) {
		t.Errorf("%s's entries: %v, were %v before %s's deletion", stay.name, held, stayHeld, gone.name)
	}
	c.waitHint(ns, "keep", []string{stay.name})
	if w != nil {
		w.checkNodeDeleted(c, gone, stay, deleted)
	} else {
		t.Log("the workloads step did not pass: its Node deletion checks are left out")
	}
}

// stickyPodTemplate is a pod template of app app with annotations, a CPU
// request of stickyCPU and a 2 s grace period; nothing in it names a node.
func stickyPodTemplate(app string, annotations map[string]string) corev1.PodTemplateSpec {
	tmpl := clusterPodTemplate(app, annotations)
	tmpl.Spec.Affinity = nil
	tmpl.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(stickyCPU)}
	return tmpl
}

// stickyRun is what stickyRounds saw of one workload.
type stickyRun struct {
	holder, other string         // the node that held the IP; the other one
	lifecyclesOn  map[string]int // sticky pod lifecycles (ADD to DEL) per node
}

// stickyRounds runs a sticky workload's rounds: its one pod (matching
// selector, identity identity) runs; once its node publishes the record, a
// pod requesting steerCPU is bound there; placementDeletes deletes each
// bring the pod back there with the same IP; then, with the policy's
// binding removed, one more delete moves it to the other node with another
// IP (the binding is put back at the end, the steering pod removed).
func (c *cluster) stickyRounds(ns, selector, identity string) stickyRun {
	t := c.t
	t.Helper()
	first := c.waitSticky(ns, selector, "", 3*time.Minute)
	holder := c.node(first.Node)
	var other *node
	for _, n := range c.nodes {
		if n != holder {
			other = n
		}
	}
	run := stickyRun{holder: holder.name, other: other.name, lifecyclesOn: map[string]int{}}
	eventually(t, fmt.Sprintf("%s publishes %s/%s", holder.name, ns, identity), time.Minute, 500*time.Millisecond, func() (bool, string) {
		h, ok := c.holdOf(ns, identity)
		return ok && h.Node == holder.name && h.Pod == first.Name, fmt.Sprintf("entry %+v", h)
	})
	c.waitHint(ns, identity, []string{holder.name})
	steer := c.steerPod(ns, holder.name)
	t.Logf("%s/%s runs on %s with %s; %s/%s (CPU %s) bound there makes %s the scheduler's own choice",
		ns, first.Name, holder.name, first.IP, ns, steer, steerCPU, other.name)
	c.forgeClaims(other, ns, identity, first.Name)

	var took []time.Duration
	last := first
	for i := 1; i <= placementDeletes; i++ {
		start := time.Now()
		c.deletePod(ns, last.Name)
		next := c.waitSticky(ns, selector, last.UID, 2*time.Minute)
		took = append(took, time.Since(start))
		run.lifecyclesOn[holder.name]++
		if next.Node != holder.name || next.IP != first.IP {
			t.Fatalf("delete %d of %s/%s: its replacement %s runs on %s with %s, want %s with %s",
				i, ns, identity, next.Name, next.Node, next.IP, holder.name, first.IP)
		}
		last = next
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("%s/%s: %d deletes, every replacement on %s with %s; delete → Running with the same IP: min %s, median %s, max %s",
		ns, identity, placementDeletes, holder.name, first.IP, took[0].Round(10*time.Millisecond),
		took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond))

	// 2. The control: the same delete without the policy.
	c.kubectl("delete", "mutatingadmissionpolicybinding", placementBindingName)
	c.waitHint(ns, identity, nil)
	c.deletePod(ns, last.Name)
	moved := c.waitSticky(ns, selector, last.UID, 2*time.Minute)
	run.lifecyclesOn[holder.name]++
	if moved.Node == holder.name || moved.IP == first.IP {
		t.Fatalf("control without the placement policy: %s/%s's replacement runs on %s with %s — the scheduler's own choice was expected to be %s (the test proves nothing)",
			ns, identity, moved.Node, moved.IP, other.name)
	}
	t.Logf("control without the policy: the replacement of %s/%s went to %s with %s (%s keeps %s reserved)",
		ns, identity, moved.Node, moved.IP, holder.name, first.IP)
	c.applyPlacement()
	c.remove(ns, "pod", steer)

	// 3. The tie: both nodes hold the identity now; the one that ran the
	// pod last wins.
	if h, ok := c.holdOf(ns, identity); !ok || h.Node != other.name || h.Pod != moved.Name {
		t.Fatalf("%s/%s after the move: entry %+v, want %s's for %s", ns, identity, h, other.name, moved.Name)
	}
	c.waitHint(ns, identity, []string{other.name})
	c.deletePod(ns, moved.Name)
	back := c.waitSticky(ns, selector, moved.UID, 2*time.Minute)
	run.lifecyclesOn[other.name]++
	if back.Node != other.name || back.IP != moved.IP {
		t.Fatalf("after the move %s/%s's replacement runs on %s with %s, want %s (which ran it last) with %s",
			ns, identity, back.Node, back.IP, other.name, moved.IP)
	}
	t.Logf("tie: %s and %s both hold %s/%s; the hint names %s, which ran it last, and the replacement runs there with %s",
		holder.name, other.name, ns, identity, other.name, moved.IP)
	run.lifecyclesOn[other.name]++ // the last pod's, ended by the caller or by the Node's deletion
	return run
}

// forgeClaims tries, with node n's credentials, to claim identity in ns for
// pod (which runs on another node) and for a pod that never ran: the API
// server must refuse both (the Node authorizer knows neither pod as n's)
// and store nothing.
func (c *cluster) forgeClaims(n *node, ns, identity, pod string) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	before, _ := c.holdOf(ns, identity)
	ownersBefore := c.ownersOf(ns, placement.ShardOf(identity))
	api := placement.NewAPI(c.clientAs(c.tokens[nodeUser(n.name)]), n.name)
	uid, err := api.NodeUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{pod, identity + "-never-ran"} {
		forged := placement.Hold{Node: n.name, Pod: p, IPs: []string{"10.244.9.9"}, Since: time.Now()}
		_, err := api.Apply(ctx, ns, placement.ShardOf(identity), uid, map[string]placement.Hold{identity: forged}, true)
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s claiming %s/%s for pod %s: %v, want Forbidden", n.name, ns, identity, p, err)
		}
		t.Logf("%s claiming %s/%s for pod %s: Forbidden (%v)", n.name, ns, identity, p, err)
	}
	if after, ok := c.holdOf(ns, identity); !ok || !after.Equal(before) {
		t.Fatalf("%s/%s after %s's refused claims: %+v, was %+v", ns, identity, n.name, after, before)
	}
	if owners := c.ownersOf(ns, placement.ShardOf(identity)); !slices.Equal(owners, ownersBefore) {
		t.Fatalf("shard %s/%s owned by %v after %s's refused claims, was %v", ns, placement.ShardOf(identity), owners, n.name, ownersBefore)
	}
}

// waitSticky waits until exactly one pod of ns matching selector, other
// than the pod with UID old, is Ready without a container restart, with an
// IP of its node's subnet that its node's runtime reports for the pod's one
// ready sandbox; old may still be terminating.
func (c *cluster) waitSticky(ns, selector, old string, timeout time.Duration) placedPod {
	t := c.t
	t.Helper()
	ctx := context.Background()
	var out placedPod
	eventually(t, fmt.Sprintf("a new pod %s in %s Ready", selector, ns), timeout, 200*time.Millisecond, func() (bool, string) {
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		var fresh []corev1.Pod
		for _, p := range pods.Items {
			if string(p.UID) != old && p.DeletionTimestamp == nil {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) != 1 {
			return false, fmt.Sprintf("%d new pods", len(fresh))
		}
		pp, ok, why := c.placed(ctx, &fresh[0])
		out = pp
		return ok, why
	})
	return out
}

// steerPod binds a pod requesting steerCPU to node and waits until it runs;
// it returns its name.
func (c *cluster) steerPod(ns, node string) string {
	t := c.t
	t.Helper()
	name := "steer-" + node
	p := testPod(name, nil)
	p.Namespace, p.Spec.NodeName = ns, node
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(steerCPU)}
	if _, err := c.client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.node(node).waitPodRunningIn(ns, name, 2*time.Minute)
	return name
}

// deletePod deletes a pod with its own grace period.
func (c *cluster) deletePod(ns, name string) {
	c.t.Helper()
	if err := c.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
}

// remove deletes an object with kubectl and waits until it and what it owns
// (foreground cascading) are gone.
func (c *cluster) remove(ns, kind, name string) {
	c.t.Helper()
	c.kubectl("delete", "-n", ns, kind, name, "--cascade=foreground", "--wait=true", "--timeout=2m")
}

// waitHint waits until the API server's placement policy gives a new pod
// of identity identity in ns (a reservation, no node) exactly the preferred
// node affinity terms of weight placementWeight for nodes, none when nodes
// is empty: a server-side dry-run create runs the mutating admission
// policies and stores nothing.
func (c *cluster) waitHint(ns, identity string, nodes []string) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	want := fmt.Sprint(nodes)
	eventually(t, fmt.Sprintf("placement hint for %s/%s = %s", ns, identity, want), time.Minute, 500*time.Millisecond, func() (bool, string) {
		p := unboundPod(ns, "", map[string]string{annReservation: "10m", annIdentity: identity})
		got, err := c.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		var hinted []string
		if a := got.Spec.Affinity; a != nil && a.NodeAffinity != nil {
			for _, term := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				for _, f := range term.Preference.MatchFields {
					if term.Weight == placementWeight && f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
						hinted = append(hinted, f.Values...)
					}
				}
			}
		}
		slices.Sort(hinted)
		return fmt.Sprint(hinted) == want, fmt.Sprintf("hint %v", hinted)
	})
}
