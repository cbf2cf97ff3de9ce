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
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
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
	placementBindingName = "stickyip-placement-shards"
	// nodeForgottenWithin is how soon a deleted Node's entries must leave
	// the index: "within seconds", the controller's next sync.
	nodeForgottenWithin = 10 * time.Second
)

// placement is the placement hint on the two-node cluster (kube-scheduler,
// kube-controller-manager, each node's kubelet, containerd, CNI chain and
// checkpointd publishing its NodeRecord), with deploy/placement applied by
// kubectl and stickyip-controller beside the control plane (a step of
// TestCluster):
//
//  1. A StatefulSet pod (io.kubernetes.cri/reserved-ip-duration) and then a
//     Deployment pod with stickyip.io/identity, each deleted 10 times, come
//     back every time on the node that holds their IP, with that IP, and
//     with the hint's term in their spec, although a CPU-hungry pod on that
//     node makes the other node the scheduler's own choice. Before the
//     StatefulSet pod's deletes, every attack on its entry is refused: the
//     other node's credentials on every write path of the holder's record,
//     its claims for pods that do not back them (a mirror pod it makes up
//     among them), a namespace administrator's writes of the index, and a
//     pod author's bare pod with stickyip.io/identity: db-0 bound to the
//     other node.
//  2. The control, on the same cluster: with the policy's binding removed,
//     one more delete of each moves the pod to the other node and another
//     IP.
//  3. The tie: both nodes now hold the identity; the index names the node
//     whose pod is the later, and the next delete brings the pod back there.
//  4. Strict placement: a StatefulSet annotated
//     stickyip.io/placement: required, with a required node affinity term of
//     its own, deleted 5 times with the CPU-hungry pod on its node: back
//     there with its IP every time, its own term kept and ANDed; drained
//     (cordon and the Eviction API): its replacement, its own term ANDed
//     with the node, unbound and refused by the scheduler itself (its
//     FailedScheduling event: the node unschedulable, the other not
//     matching its affinity), back there with its IP after uncordon; the
//     preferred StatefulSet drained the same way moves to the other node.
//  5. A deleted Node's entries stop counting, and a pod required onto it
//     is named by `checkpointd stranded`: TestCluster's last step,
//     nodeDeleted.
//
// It prints delete → Running-with-the-same-IP times and each node's API
// writes per sticky pod lifecycle (counted from the step's start: the
// nodes' checkpointd ran the earlier steps too).
func (c *cluster) placement() *placementRun {
	t := c.t
	ctx := context.Background()
	c.applyPlacement()
	c.ensurePlacementController()
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
	c.createStickyDB(ns)
	dbRun := c.stickyRounds(ns, "app=db", "db-0", true)

	// 1b. Deployment cache: its pods share the identity "identity:cache";
	// each replacement is created while the old pod still terminates.
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
	cacheRun := c.stickyRounds(ns, "app=cache", "identity:cache", false)

	// 4. Strict placement, and the drain.
	reqRun := c.requiredRounds(ns)
	c.drainMoves(ns, "app=db", "db-0")
	c.remove(ns, "statefulset", "db")
	c.remove(ns, "statefulset", "rdb")

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
		lifecycles := dbRun.lifecyclesOn[n.name] + cacheRun.lifecyclesOn[n.name] + reqRun.lifecyclesOn[n.name] + 1 // the mimic pod
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
// 5, with the workloads' step 4 when w is not nil).
//
// The node that ran the cache pod last stops (checkpointd, kubelet) and its
// Node is deleted. Placement: stickyip-controller takes its entries out of
// the index within seconds (nodeForgottenWithin) and, a minute later,
// deletes its record; the other node's stay; `checkpointd stranded` names
// the pod required onto the gone node, and one created after is free.
// Workloads: the deleted Node's pods leave the API (pod GC), a ConfigMap it
// owned is garbage-collected, and the workloads' pods on the other node
// keep their UID, IP and readiness.
func (c *cluster) nodeDeleted(p *placementRun, w *workloadsRun) {
	t := c.t
	ctx := context.Background()
	ns := p.ns
	c.ensurePlacementController()
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
	c.waitIndexed(ns, "keep", stay.name, "keep")
	// A pod that must run on gone (stickyip.io/placement: required): pin ran
	// there, and its replacement, created while gone is cordoned, waits.
	pin := testPod("pin", map[string]string{annReservation: "10m", annIdentity: "pin", annPlacement: "required"})
	pin.Namespace, pin.Spec.NodeName = ns, gone.name
	if _, err := c.client.CoreV1().Pods(ns).Create(ctx, pin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone.waitPodRunningIn(ns, "pin", 2*time.Minute)
	c.waitIndexed(ns, "identity:pin", gone.name, "pin")
	c.kubectl("cordon", gone.name)
	c.remove(ns, "pod", "pin")
	waiting := unboundPod(ns, "", map[string]string{annReservation: "10m", annIdentity: "pin", annPlacement: "required"})
	waiting.GenerateName = "pin-"
	// Pending whatever the scheduler's view of the cordon: right after an
	// API server restart (the reimage step's) its informers can lag by a
	// minute, and it bound such a pod to the cordoned node. A label no node
	// has keeps it Pending; stranded reads only the hint's metadata.name
	// term.
	waiting.Spec.NodeSelector = map[string]string{"stickyip.test/never": "scheduled"}
	created, err := c.client.CoreV1().Pods(ns).Create(ctx, waiting, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.requireHinted(ns, created.Name, gone.name, true)
	if out, code := c.stranded(); code != 0 {
		t.Fatalf("checkpointd stranded with %s still registered: exit %d\n%s", gone.name, code, out)
	}
	// The remaining node's entries that must outlive the deletion: those
	// of this step's namespace that last past the step. Other steps'
	// namespaces are being deleted meanwhile, and their short reservations
	// end (the reimage step's 30 s one).
	lasting := time.Now().Add(5 * time.Minute)
	goneHeld, stayHeld := c.entriesOf(gone.name), c.lastingIn(stay.name, ns, lasting)
	// The earlier steps' sticky pods have entries too: this step's own
	// must be among them.
	if _, ok := goneHeld[ns+"/identity:cache"]; !ok {
		t.Fatalf("entries before the Node's deletion: %s %v, want %s/identity:cache among them", gone.name, slices.Sorted(maps.Keys(goneHeld)), ns)
	}
	if !slices.Contains(stayHeld, ns+"/keep") {
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
	// Within seconds: the controller's next sync after the Node's deletion.
	eventually(t, "the index naming the deleted Node "+gone.name+" nowhere", nodeForgottenWithin, 100*time.Millisecond, func() (bool, string) {
		for key := range goneHeld {
			kns, id, _ := strings.Cut(key, "/")
			if c.hinted(kns, id) == gone.name {
				return false, fmt.Sprintf("%s still gives %s to %s", kns, id, gone.name)
			}
		}
		return true, ""
	})
	t.Logf("Node %s deleted → its entries %v out of the index in %s",
		gone.name, slices.Sorted(maps.Keys(goneHeld)), time.Since(deleted).Round(100*time.Millisecond))
	// Each of its identities is now the remaining node's, if that node
	// still lists it (an older claim: its reservation has not expired), or
	// nobody's.
	for key := range goneHeld {
		kns, id, _ := strings.Cut(key, "/")
		h := c.hinted(kns, id)
		if k, keyed := contract.IdentityKey(id); keyed && kns == ns {
			var want []string
			if h != "" {
				want = []string{h}
			}
			c.waitHint(kns, k, want)
		}
		t.Logf("%s/%s after %s's deletion: the hint names %q", kns, id, gone.name, h)
	}
	if held := c.lastingIn(stay.name, ns, lasting); fmt.Sprint(held) != fmt.Sprint(stayHeld) {
		t.Errorf("%s's entries: %v, were %v before %s's deletion", stay.name, held, stayHeld, gone.name)
	}
	if c.hinted(ns, "keep") != stay.name {
		t.Errorf("%s/keep: hint %q, want %s", ns, c.hinted(ns, "keep"), stay.name)
	}
	// The pod created before waits, and says so through checkpointd
	// stranded; one created now is free and runs on the remaining node.
	out, code := c.stranded()
	if code != 1 || !strings.Contains(out, created.Name) || !strings.Contains(out, gone.name) {
		t.Fatalf("checkpointd stranded after %s's deletion: exit %d, want 1 naming %s/%s and %s:\n%s", gone.name, code, ns, created.Name, gone.name, out)
	}
	t.Logf("checkpointd stranded names the pod required onto the deleted Node:\n%s", out)
	free := unboundPod(ns, "", map[string]string{annReservation: "10m", annIdentity: "pin", annPlacement: "required"})
	free.GenerateName = "pin-"
	// Scheduled onto the remaining node by its name: a scheduler whose
	// Node informer lags (its watches reconnect late after the earlier
	// steps' API server restarts) bound such a pod, created after the
	// Node's deletion, to the deleted Node, and the pod GC then deleted it
	// as an orphan. What this checks is the hint: no term for the deleted
	// Node.
	free.Spec.NodeSelector = map[string]string{corev1.LabelHostname: stay.name}
	fresh, err := c.client.CoreV1().Pods(ns).Create(ctx, free, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if requiredOf(fresh.Spec.Affinity) != nil {
		t.Fatalf("a pod of identity:pin created after %s's deletion was still required onto it: %v", gone.name, fresh.Spec.Affinity)
	}
	stay.waitPodRunningIn(ns, fresh.Name, 2*time.Minute)
	c.remove(ns, "pod", created.Name)
	c.remove(ns, "pod", fresh.Name)
	if w != nil {
		w.checkNodeDeleted(c, gone, stay, deleted)
	} else {
		t.Log("the workloads step did not pass: its Node deletion checks are left out")
	}
	// The namespace controller deletes a deleted namespace's index with it.
	shards := len(c.indexIn(ns))
	start := time.Now()
	c.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=3m")
	if left := c.indexIn(ns); len(left) != 0 {
		t.Fatalf("namespace %s deleted, its index left: %s", ns, identitiesIn(left))
	}
	t.Logf("namespace %s with %d indexed identities deleted with its index by the namespace controller in %s", ns, shards, time.Since(start).Round(100*time.Millisecond))
	// Last: the controller waits a minute for a Node to come back before
	// it deletes its record.
	eventually(t, "the deleted Node's record deleted by the controller", 2*time.Minute, time.Second, func() (bool, string) {
		return c.recordOf(gone.name) == nil, "still there"
	})
	t.Logf("Node %s deleted → its NodeRecord deleted by the controller %s later", gone.name, time.Since(deleted).Round(time.Second))
}

// createStickyDB creates StatefulSet db in ns: one replica of
// stickyPodTemplate with a 10-minute IP reservation.
func (c *cluster) createStickyDB(ns string) {
	c.createStatefulSet(ns, "db", stickyPodTemplate("db", map[string]string{annReservation: "10m"}))
}

// createStatefulSet creates a StatefulSet of one replica of tmpl.
func (c *cluster) createStatefulSet(ns, name string, tmpl corev1.PodTemplateSpec) {
	c.t.Helper()
	one := int32(1)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: tmpl,
		},
	}
	if _, err := c.client.AppsV1().StatefulSets(ns).Create(context.Background(), sts, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
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
// selector, identity identity: a pod name or identity:<key>) runs; once its
// node publishes the entry, a pod requesting steerCPU is bound there; with
// attack, every attack on the entry is refused; placementDeletes deletes
// each bring the pod back there with the same IP and the hint's term; then,
// with the policy's binding removed, one more delete moves it to the other
// node with another IP (the binding is put back, the steering pod
// removed); then the tie.
func (c *cluster) stickyRounds(ns, selector, identity string, attack bool) stickyRun {
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
	c.waitIndexed(ns, identity, holder.name, first.Name)
	steer := c.steerPod(ns, holder.name)
	t.Logf("%s/%s runs on %s with %s; %s/%s (CPU %s) bound there makes %s the scheduler's own choice",
		ns, first.Name, holder.name, first.IP, ns, steer, steerCPU, other.name)
	if attack {
		c.recordAttacks(other, holder, ns, identity, first)
	}

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
		c.requireHinted(ns, next.Name, holder.name, false)
		last = next
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("%s/%s: %d deletes, every replacement on %s with %s and the hint's term; delete → Running with the same IP: min %s, median %s, max %s",
		ns, identity, placementDeletes, holder.name, first.IP, took[0].Round(10*time.Millisecond),
		took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond))

	// 2. The control: the same delete without the policy.
	c.kubectl("delete", "mutatingadmissionpolicybinding", placementBindingName)
	c.waitHintApplied(ns, false)
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
	c.waitHintApplied(ns, true)
	c.remove(ns, "pod", steer)

	// 3. The tie: both nodes hold the identity now; the one whose pod is
	// the later wins.
	c.waitIndexed(ns, identity, other.name, moved.Name)
	if _, ok := c.entriesOf(holder.name)[ns+"/"+identity]; !ok {
		t.Fatalf("%s/%s: %s's entry gone while its reservation lasts", ns, identity, holder.name)
	}
	c.deletePod(ns, moved.Name)
	back := c.waitSticky(ns, selector, moved.UID, 2*time.Minute)
	run.lifecyclesOn[other.name]++
	if back.Node != other.name || back.IP != moved.IP {
		t.Fatalf("after the move %s/%s's replacement runs on %s with %s, want %s (which ran it last) with %s",
			ns, identity, back.Node, back.IP, other.name, moved.IP)
	}
	c.requireHinted(ns, back.Name, other.name, false)
	t.Logf("tie: %s and %s both hold %s/%s; the hint names %s, which ran the later pod, and the replacement runs there with %s",
		holder.name, other.name, ns, identity, other.name, moved.IP)
	run.lifecyclesOn[other.name]++ // the last pod's, ended by the caller or by the Node's deletion
	return run
}

// waitIndexed waits until node's record holds identity in ns for pod and
// the index gives the identity to node; for a keyed identity it also asks
// the API server (a dry run: the name of a pod-name identity's pod is
// taken while it runs).
func (c *cluster) waitIndexed(ns, identity, node, pod string) {
	t := c.t
	t.Helper()
	if _, keyed := contract.IdentityKey(identity); !keyed {
		pod = identity
	}
	eventually(t, fmt.Sprintf("%s publishes %s/%s, indexed", node, ns, identity), time.Minute, 500*time.Millisecond, func() (bool, string) {
		e, ok := c.entriesOf(node)[ns+"/"+identity]
		h := c.hinted(ns, identity)
		return ok && e.Pod == pod && h == node, fmt.Sprintf("entry %+v, index %q", e, h)
	})
	if key, keyed := contract.IdentityKey(identity); keyed {
		c.waitHint(ns, key, []string{node})
	}
}

// lastingIn returns node's entries of namespace ns that last past beyond
// (running, held, or reserved until after it): what nothing but a change
// to the node's own entries can remove before then.
func (cp *controlPlane) lastingIn(node, ns string, beyond time.Time) []string {
	var out []string
	for key, e := range cp.entriesOf(node) {
		if strings.HasPrefix(key, ns+"/") && (e.Running() || e.Held || e.Until.After(beyond)) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// requireHinted fails the test unless pod ns/name carries the hint for
// node: the preferred term, or with required every required term holding
// the node's name.
func (c *cluster) requireHinted(ns, name, node string, required bool) {
	t := c.t
	t.Helper()
	p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !required {
		if !hasPreferred(p, node) {
			t.Fatalf("pod %s/%s on %s has no preferred term for %s: %v", ns, name, p.Spec.NodeName, node, p.Spec.Affinity)
		}
		return
	}
	sel := requiredOf(p.Spec.Affinity)
	if sel == nil || len(sel.NodeSelectorTerms) == 0 {
		t.Fatalf("pod %s/%s has no required node affinity: %v", ns, name, p.Spec.Affinity)
	}
	for _, term := range sel.NodeSelectorTerms {
		if !slices.ContainsFunc(term.MatchFields, func(f corev1.NodeSelectorRequirement) bool {
			return f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && fmt.Sprint(f.Values) == "["+node+"]"
		}) {
			t.Fatalf("pod %s/%s: required term %v does not name %s", ns, name, term, node)
		}
	}
}

// hasPreferred reports whether p prefers node with the hint's weight.
func hasPreferred(p *corev1.Pod, node string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return false
	}
	return slices.ContainsFunc(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, func(term corev1.PreferredSchedulingTerm) bool {
		return term.Weight == placementWeight && slices.ContainsFunc(term.Preference.MatchFields, func(f corev1.NodeSelectorRequirement) bool {
			return f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && fmt.Sprint(f.Values) == "["+node+"]"
		})
	})
}

// recordAttacks tries, before the deletes that show the pod still comes
// back to holder, every way to make holder's entry of identity (for pod
// first) stop counting or attract the pod elsewhere: with node other's
// credentials, every write path of holder's record and claims of its own
// no pod bound to it backs (a mirror pod it makes up among them); a
// namespace administrator's writes of the index; and a pod author's bare
// pod annotated stickyip.io/identity with the identity's name, bound to
// other (whose honest checkpointd publishes it as another identity). Each
// is refused or names another identity; the entry and the index are
// unchanged.
func (c *cluster) recordAttacks(other, holder *node, ns, identity string, first placedPod) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	before := c.entriesOf(holder.name)[ns+"/"+identity]
	tok := c.tokens[nodeUser(other.name)]
	// The pod author: a bare pod mimic, annotated stickyip.io/identity with
	// the identity's name, bound to other.
	mimic := testPod("mimic", map[string]string{annReservation: "10m", annIdentity: identity})
	mimic.Namespace, mimic.Spec.NodeName = ns, other.name
	if _, err := c.client.CoreV1().Pods(ns).Create(ctx, mimic, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mimicIP := other.waitPodRunningIn(ns, "mimic", 2*time.Minute)
	c.waitIndexed(ns, contract.KeyedIdentity(identity), other.name, "mimic")
	if mimicIP == first.IP {
		t.Fatalf("the mimic pod got %s/%s's address %s", ns, identity, first.IP)
	}
	// The other node's writes of the holder's record, on every path.
	admin, ro := c.recordsAs(c.adminToken), c.recordsAs(tok)
	const notOwn = "may write only its own NodeRecord"
	refusedEverywhere(t, other.name, "empty "+holder.name+"'s record", ro, admin, holder.name, func(u *unstructured.Unstructured) {
		unstructured.RemoveNestedField(u.Object, "spec", "entries")
	}, notOwn)
	refusedEverywhere(t, other.name, "delete "+holder.name+"'s record", ro, admin, holder.name, nil, notOwn)
	// Its own claims that no pod bound to it backs: refused by the
	// controller. An attacker with the node's credentials need not run its
	// honest checkpointd, which would put back what the store holds at its
	// next pass (within a second), often before the controller has judged
	// the forged entry: it is held (SIGSTOP) while the claims are judged.
	other.holdCheckpointd(t)
	yes := true
	made := testPod(identity+"-"+other.name, map[string]string{"kubernetes.io/config.mirror": "x"})
	made.Namespace, made.Spec.NodeName = ns, other.name
	made.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: other.name, UID: c.nodeUID(other.name), Controller: &yes}}
	// The kubelet deletes a mirror pod it has no static pod for, maybe
	// before the claim is judged (the controller keeps a deleted pod's
	// facts): the entry takes its UID from the creation.
	mirror, err := c.clientAs(tok).CoreV1().Pods(ns).Create(ctx, made, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%s making up a mirror pod (NodeRestriction lets a kubelet): %v", other.name, err)
	}
	mirrorEntry := recordEntry(ns, identity, made.Name, string(mirror.UID), "10.244.9.9")
	for _, a := range []struct {
		what string
		e    placementv1.Entry
		why  string // what the controller's refusal says
	}{
		{identity + " for its pod mimic", c.podEntry(ns, identity, "mimic", "10.244.9.9"), "its identity is " + contract.KeyedIdentity(identity) + ", not " + identity},
		{identity + ", bound to " + holder.name, c.podEntry(ns, identity, first.Name, "10.244.9.9"), "bound to node " + holder.name + ", not " + other.name},
		{identity + " for its mirror pod " + made.Name, mirrorEntry, "a mirror pod (kubernetes.io/config.mirror)"},
	} {
		if why := c.claimRefused(other.name, a.e); !strings.Contains(why, a.why) {
			t.Errorf("%s claiming %s: refused with %q, want the controller's refusal: %s", other.name, a.what, why, a.why)
		}
	}
	other.releaseCheckpointd(t)
	c.kubectl("delete", "-n", ns, "pod", made.Name, "--ignore-not-found", "--wait=true", "--timeout=2m")
	// A namespace administrator writes no index (RBAC grants it ConfigMaps:
	// the refusal is stickyip-index-writer's).
	shard, patch := shardPatch(identity, other.name)
	_, err = c.indexAs(c.namespaceAdminToken(ns), ns).Patch(ctx, shard, types.MergePatchType, patch, metav1.PatchOptions{})
	requireRefused(t, "a namespace administrator pointing "+identity+" at "+other.name, err, indexWriterRefusal(shard))
	c.waitIndexed(ns, identity, holder.name, first.Name)
	if after := c.entriesOf(holder.name)[ns+"/"+identity]; after.PodUID != before.PodUID || fmt.Sprint(after.Addresses) != fmt.Sprint(before.Addresses) {
		t.Fatalf("%s/%s after the attacks: %+v; want %s's %+v", ns, identity, after, holder.name, before)
	}
	c.remove(ns, "pod", "mimic")
	t.Logf("attacks on %s/%s: the other node's writes of the holder's record (every path), its claims no pod backs, a namespace administrator's index write, a pod author's mimic: refused or another identity; the entry and the index unchanged", ns, identity)
}

// claimRefused adds entry e to node's record with the node's credentials
// and waits until the controller refuses it, naming e's pod (a refusal of
// an earlier claim of the identity names another), and returns the
// refusal; the claim accepted fails the test.
func (c *cluster) claimRefused(node string, e placementv1.Entry) string {
	t := c.t
	t.Helper()
	if err := c.writeEntriesAs(node, nil, e); err != nil {
		t.Fatalf("%s writing its claim of %s/%s: %v", node, e.Namespace, e.Identity, err)
	}
	of := fmt.Sprintf("pod %s/%s (uid %s): ", e.Namespace, e.Pod, e.PodUID)
	var why string
	eventually(t, fmt.Sprintf("the controller's verdict on %s's claim of %s/%s for %s", node, e.Namespace, e.Identity, e.Pod), 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		cl := c.claimOf(node, e.Namespace, e.Identity)
		switch {
		case cl == nil:
			return false, "none yet"
		case cl.Refused == "" && cl.PodUID == e.PodUID:
			t.Fatalf("%s's claim of %s/%s for %s accepted: %+v", node, e.Namespace, e.Identity, e.Pod, *cl)
		case strings.HasPrefix(cl.Refused, of):
			why = cl.Refused
			return true, ""
		}
		return false, fmt.Sprintf("%+v", *cl)
	})
	return why
}

// requiredRounds is strict placement: StatefulSet rdb, annotated
// stickyip.io/placement: required, with a required node affinity term of
// its own (kubernetes.io/os In [linux]). Its pod, deleted 5 times with a
// CPU-hungry pod on its node, comes back there with its IP, its own term
// kept and the node ANDed into it; drained (cordon, then the Eviction API,
// as kubectl drain does), its replacement is refused by the scheduler
// while its node is cordoned (waitUnschedulable) and runs there with its
// IP once uncordoned.
func (c *cluster) requiredRounds(ns string) stickyRun {
	t := c.t
	t.Helper()
	const deletes = 5
	tmpl := stickyPodTemplate("rdb", map[string]string{annReservation: "10m", annPlacement: "required"})
	linux := corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}
	tmpl.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{linux}}}}}}
	c.createStatefulSet(ns, "rdb", tmpl)
	first := c.waitSticky(ns, "app=rdb", "", 3*time.Minute)
	holder := c.node(first.Node)
	run := stickyRun{holder: holder.name, lifecyclesOn: map[string]int{}}
	c.waitIndexed(ns, "rdb-0", holder.name, first.Name)
	steer := c.steerPod(ns, holder.name)
	last := first
	for i := 1; i <= deletes; i++ {
		c.deletePod(ns, last.Name)
		next := c.waitSticky(ns, "app=rdb", last.UID, 2*time.Minute)
		run.lifecyclesOn[holder.name]++
		if next.Node != holder.name || next.IP != first.IP {
			t.Fatalf("required, delete %d: rdb-0 runs on %s with %s, want %s with %s", i, next.Node, next.IP, holder.name, first.IP)
		}
		c.requireHinted(ns, next.Name, holder.name, true)
		p, _ := c.client.CoreV1().Pods(ns).Get(context.Background(), next.Name, metav1.GetOptions{})
		if terms := requiredOf(p.Spec.Affinity).NodeSelectorTerms; len(terms) != 1 || fmt.Sprint(terms[0].MatchExpressions) != fmt.Sprint([]corev1.NodeSelectorRequirement{linux}) {
			t.Fatalf("required, delete %d: the template's own required term not kept: %v", i, terms)
		}
		last = next
	}
	t.Logf("required: %d/%d deletes of %s/rdb-0 with %s's CPU taken back on %s with %s, the template's own term kept and ANDed", deletes, deletes, ns, holder.name, holder.name, first.IP)
	c.remove(ns, "pod", steer)

	// Drain: cordon, then evict (what kubectl drain does to each pod).
	c.kubectl("cordon", holder.name)
	c.evict(ns, last.Name)
	run.lifecyclesOn[holder.name]++
	evicted := time.Now()
	pending, why := c.waitUnschedulable(ns, "app=rdb", last.UID, holder.name, []corev1.NodeSelectorRequirement{linux})
	refusedIn := time.Since(evicted)
	c.kubectl("uncordon", holder.name)
	back := c.waitSticky(ns, "app=rdb", last.UID, 2*time.Minute)
	if back.Node != holder.name || back.IP != first.IP {
		t.Fatalf("required, after uncordon: rdb-0 runs on %s with %s, want %s with %s", back.Node, back.IP, holder.name, first.IP)
	}
	t.Logf("required: %s drained (cordon + eviction): %s/%s unbound, its own term ANDed with %s, refused by the scheduler %s after the eviction (%q); after uncordon back on %s with %s",
		holder.name, ns, pending, holder.name, refusedIn.Round(100*time.Millisecond), why, holder.name, first.IP)
	run.lifecyclesOn[holder.name]++
	return run
}

// drainMoves is the drain's control: the preferred StatefulSet's pod
// (identity identity), evicted from its cordoned node, moves to the other
// node with another IP, as documented.
func (c *cluster) drainMoves(ns, selector, identity string) {
	t := c.t
	t.Helper()
	cur := c.waitSticky(ns, selector, "", time.Minute)
	c.kubectl("cordon", cur.Node)
	c.evict(ns, cur.Name)
	moved := c.waitSticky(ns, selector, cur.UID, 2*time.Minute)
	c.kubectl("uncordon", cur.Node)
	if moved.Node == cur.Node || moved.IP == cur.IP {
		t.Fatalf("preferred, drained: %s/%s runs on %s with %s, want the other node", ns, identity, moved.Node, moved.IP)
	}
	t.Logf("preferred (the control): %s drained, %s/%s moved to %s with %s (was %s)", cur.Node, ns, identity, moved.Node, moved.IP, cur.IP)
}

// evict evicts pod ns/name through the Eviction API.
func (c *cluster) evict(ns, name string) {
	c.t.Helper()
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := c.client.PolicyV1().Evictions(ns).Evict(context.Background(), ev); err != nil {
		c.t.Fatalf("evict %s/%s: %v", ns, name, err)
	}
}

// waitUnschedulable waits until the pod matching selector that replaces
// the pod with UID old is refused by the scheduler itself: a
// FailedScheduling event for that pod saying that of the two nodes, holder
// is unschedulable (cordoned) and the other does not match the pod's node
// affinity. The pod must be unbound then, and carry the hint's required
// term for holder ANDed into its own (want, the template's); it returns
// the pod's name and the event's message.
func (c *cluster) waitUnschedulable(ns, selector, old, holder string, want []corev1.NodeSelectorRequirement) (string, string) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	eventually(t, fmt.Sprintf("the replacement of %s in %s created", selector, ns), 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if string(p.UID) != old && p.DeletionTimestamp == nil {
				pod = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none new", len(pods.Items))
	})
	c.requireHinted(ns, pod.Name, holder, true)
	if terms := requiredOf(pod.Spec.Affinity).NodeSelectorTerms; len(terms) != 1 || fmt.Sprint(terms[0].MatchExpressions) != fmt.Sprint(want) {
		t.Fatalf("%s/%s while %s is cordoned: required terms %v, want the template's own %v ANDed with %s", ns, pod.Name, holder, terms, want, holder)
	}
	var msg string
	eventually(t, fmt.Sprintf("the scheduler's FailedScheduling event for %s/%s", ns, pod.Name), 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		evs, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=FailedScheduling"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			msg = e.Message
			// 1.37 names the plugin; earlier minors said "didn't match
			// Pod's node affinity/selector".
			if strings.Contains(msg, "0/2 nodes are available") && strings.Contains(msg, "1 node(s) were unschedulable") &&
				(strings.Contains(msg, "1 node(s) didn't satisfy plugin(s) [NodeAffinity]") || strings.Contains(msg, "1 node(s) didn't match Pod's node affinity/selector")) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d FailedScheduling events, the last %q", len(evs.Items), msg)
	})
	p, err := c.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != pod.UID || p.Spec.NodeName != "" {
		t.Fatalf("%s/%s (uid %s) after the scheduler's FailedScheduling: uid %s bound to %q while %s is cordoned", ns, pod.Name, pod.UID, p.UID, p.Spec.NodeName, holder)
	}
	return pod.Name, msg
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
// with stickyip.io/identity: key in ns (a reservation, no node) exactly the
// preferred node affinity terms of weight placementWeight for nodes, none
// when nodes is empty: a server-side dry-run create runs the mutating
// admission policies and stores nothing.
func (c *cluster) waitHint(ns, key string, nodes []string) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	want := fmt.Sprint(nodes)
	eventually(t, fmt.Sprintf("placement hint for %s/identity:%s = %s", ns, key, want), time.Minute, 500*time.Millisecond, func() (bool, string) {
		p := unboundPod(ns, "", map[string]string{annReservation: "10m", annIdentity: key})
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

// waitHintApplied waits until the API server applies the hint (on) or no
// longer does (its binding removed): a keyed identity the index of ns
// holds gets the term for the node it names, or none.
func (c *cluster) waitHintApplied(ns string, on bool) {
	c.t.Helper()
	for id, node := range c.indexIn(ns) {
		if key, keyed := contract.IdentityKey(id); keyed {
			var want []string
			if on {
				want = []string{node}
			}
			c.waitHint(ns, key, want)
			return
		}
	}
	c.t.Fatalf("no keyed identity in %s's index to check the hint with", ns)
}
