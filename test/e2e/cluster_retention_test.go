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
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/retention"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
)

const (
	// retentionNamespace holds the step's StatefulSets.
	retentionNamespace = "retain"
	// retentionKeep is the reservation of the members that are held: shorter
	// than the step holds them, so that "held" is not "not expired yet".
	retentionKeep = 20 * time.Second
	// releaseWithin is what "released within seconds" allows: from a pod's
	// deletion (it left the API) to its address free on its node — the
	// controller's pass, its status write, the node's watch and its next
	// pass (1 s here).
	releaseWithin = 5 * time.Second
)

// retention is the StatefulSet retention of stickyip-controller on the
// two-node cluster (a step of TestCluster, after placement: deploy/placement
// and the controller run). The controller decides, from the StatefulSets it
// alone watches, what the StatefulSet controller and the garbage collector
// do to each member's volume claims (controller/retention); each node's
// checkpointd applies the verdicts its NodeRecord's status carries. Each
// case is judged by the address the member gets back (or not) and by
// `stickyip list --json` on its node, whose account of a held reservation is
// the controller's (the claim's why):
//
//  1. whenScaled Retain (no policy): StatefulSet db of 3 scaled to 1: db-1
//     and db-2 held past their own 20 s (a plain pod's 20 s reservation,
//     the control, ends meanwhile), then back with their addresses.
//  2. whenScaled Delete: dd of 3 scaled to 1: dd-1's and dd-2's addresses
//     free within seconds of their pods' deletion (the figures printed), a
//     pod asking for one gets it; whenDeleted Delete: dd deleted, dd-0's
//     free within seconds.
//  3. The orphan cascade: orph (whenScaled Retain, whenDeleted Delete)
//     scaled 2 → 1, deleted with --cascade=orphan, created again: orph-1's
//     reservation stays held through the deletion and orph-1 comes back
//     with its address.
//  4. Re-creation within a second: rc (whenDeleted Delete) deleted and
//     created again at once: its new pods get new addresses, the old ones
//     released; the race of each release with the new pod's ADD is
//     printed from the node's logs.
//  5. A policy edited after the scale-down: db's edited from Retain to
//     Delete once db-1 and db-2 are gone (the controller's verdict on
//     db-0 shows it saw the edit): db-1 and db-2 stay held.
//  6. Off means off: StatefulSet off (one member per node) scaled to 0;
//     one node's checkpointd restarted with --follow-statefulsets=false,
//     then the nodes' grant removed and the other's restarted: every held
//     reservation on each lasts its own duration from then, as `stickyip
//     list` says. The grant is put back and both restarted as before.
//  7. Nodes read no StatefulSet: over the step, from the API server's
//     audit log, no StatefulSet request by any node's credentials; the
//     controller's StatefulSet requests are one watch (renewed).
func (c *cluster) retention() {
	t := c.t
	ctx := context.Background()
	start := time.Now()
	ns := retentionNamespace
	c.ensurePlacementController()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(ns)

	// Every StatefulSet of the step at once: their pods start together.
	keep := retentionKeep.String()
	rcNode := c.nodes[0]
	sets := []*appsv1.StatefulSet{
		statefulSetOf(ns, "db", 3, retentionTemplate("db", keep, true), nil),
		statefulSetOf(ns, "dd", 3, retentionTemplate("dd", "10m", true), retentionPolicy(contract.PolicyDelete, contract.PolicyDelete)),
		statefulSetOf(ns, "orph", 2, retentionTemplate("orph", keep, true), retentionPolicy(contract.PolicyRetain, contract.PolicyDelete)),
		statefulSetOf(ns, "rc", 2, onNode(retentionTemplate("rc", "10m", false), rcNode.name), retentionPolicy(contract.PolicyRetain, contract.PolicyDelete)),
		statefulSetOf(ns, "off", 2, spread(retentionTemplate("off", keep, false)), nil),
	}
	for _, s := range sets {
		if _, err := c.client.AppsV1().StatefulSets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	members := map[string]placedPod{}
	for _, s := range sets {
		got := c.waitMembers(ns, s.Name, int(*s.Spec.Replicas))
		maps.Copy(members, got)
		t.Logf("StatefulSet %s (%s): %s", s.Name, policyOf(s), describeMembers(got))
	}
	for _, name := range slices.Sorted(maps.Keys(members)) {
		c.waitFollowed(members[name])
	}
	control := testPod("plain", map[string]string{annReservation: keep})
	control.Namespace, control.Spec.NodeName = ns, members["db-2"].Node
	if _, err := c.client.CoreV1().Pods(ns).Create(ctx, control, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	controlIP := c.node(control.Spec.NodeName).waitPodRunningIn(ns, "plain", 2*time.Minute)

	// The scale-downs, and the control deleted with them.
	c.scale(ns, "db", 1)
	c.scale(ns, "dd", 1)
	c.scale(ns, "orph", 1)
	c.scale(ns, "off", 0)
	c.deletePod(ns, "plain")
	c.waitReleased("whenScaled Delete", members["dd-1"], members["dd-2"])
	c.requireTaken(ns, members["dd-2"])
	scaled := c.waitPodsGone(ns, "db-1", "db-2", "orph-1", "off-0", "off-1", "plain")
	for _, name := range []string{"db-1", "db-2", "orph-1", "off-0", "off-1"} {
		c.waitHeld(members[name], "")
	}
	c.requireListSaysWhy()

	// 3. The orphan cascade: orph-1 stays held through the deletion.
	orphBefore := c.setUID(ns, "orph")
	c.kubectl("delete", "-n", ns, "statefulset", "orph", "--cascade=orphan", "--wait=true", "--timeout=2m")
	// The controller's account changes from "kept while StatefulSet orph
	// exists" to nothing owning the claims: it saw the orphaning.
	c.waitHeld(members["orph-1"], "nothing deletes the volume claims of pod orph-1")
	if p, err := c.client.CoreV1().Pods(ns).Get(ctx, "orph-0", metav1.GetOptions{}); err != nil || metav1.GetControllerOf(p) != nil || string(p.UID) != members["orph-0"].UID {
		t.Fatalf("orph-0 after StatefulSet orph's orphaning deletion: %v, controller %v; want it running without one", err, controllerOf(p))
	}
	t.Logf("StatefulSet orph (uid %s) deleted with --cascade=orphan: orph-0 runs on without a controller, orph-1's %s on %s held", orphBefore, members["orph-1"].IP, members["orph-1"].Node)

	// 2. whenDeleted Delete: dd deleted, dd-0's address released.
	background := metav1.DeletePropagationBackground
	if err := c.client.AppsV1().StatefulSets(ns).Delete(ctx, "dd", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	c.waitReleased("whenDeleted Delete", members["dd-0"])

	// 4. Re-creation within a second.
	c.recreatedAtOnce(ns, "rc", members["rc-0"], members["rc-1"])

	// 5. db's policy edited after the scale-down: db-1 and db-2 stay held.
	c.editPolicy(ns, "db", members["db-0"], contract.PolicyDelete, contract.PolicyDelete)
	for _, name := range []string{"db-1", "db-2"} {
		c.waitHeld(members[name], "nothing deletes the volume claims of pod "+name)
	}

	// 1. Past their own duration: the control's reservation ends; db-1,
	// db-2 and orph-1 are still held.
	c.waitControlEnded(c.node(control.Spec.NodeName), controlIP, scaled)
	for _, name := range []string{"db-1", "db-2", "orph-1"} {
		e := c.waitHeld(members[name], "")
		if e.DurationEndsAt == nil || time.Now().Before(*e.DurationEndsAt) {
			t.Fatalf("%s on %s: its own duration ends at %v, which is not past", name, members[name].Node, e.DurationEndsAt)
		}
		t.Logf("%s on %s: %s %s, its own %s ended %s ago; `stickyip list`: %s",
			name, members[name].Node, e.IP, e.State, retentionKeep, time.Since(*e.DurationEndsAt).Round(time.Second), e.Keep)
	}
	t.Logf("control: the plain pod's %s reservation of %s on %s ended", retentionKeep, controlIP, control.Spec.NodeName)

	// Back: orph created again adopts orph-0 and brings orph-1 back; db
	// scaled back to 3.
	if _, err := c.client.AppsV1().StatefulSets(ns).Create(ctx, statefulSetOf(ns, "orph", 2, retentionTemplate("orph", keep, true),
		retentionPolicy(contract.PolicyRetain, contract.PolicyDelete)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.scale(ns, "db", 3)
	for set, names := range map[string][]string{"orph": {"orph-0", "orph-1"}, "db": {"db-0", "db-1", "db-2"}} {
		back := c.waitMembers(ns, set, len(names))
		for _, name := range names {
			if back[name].Node != members[name].Node || back[name].IP != members[name].IP {
				t.Fatalf("%s back: runs on %s with %s, want %s with %s (%s)", name, back[name].Node, back[name].IP, members[name].Node, members[name].IP, describeMembers(back))
			}
		}
		t.Logf("StatefulSet %s back after %s: %s, the same addresses on the same nodes", set, time.Since(scaled).Round(time.Second), describeMembers(back))
	}
	for _, name := range []string{"orph-1", "db-1", "db-2"} {
		c.requireHinted(ns, name, members[name].Node, true)
	}

	// 6. Off means off.
	c.followingOff(members["off-0"], members["off-1"])

	// 7. Nodes read no StatefulSet.
	c.statefulSetReaders(start, time.Now())
	c.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=3m")
}

// retentionTemplate is a pod template of app with a reservation of dur
// (and stickyip.io/placement: required when required), and no CPU
// request: the step runs a dozen pods on two nodes.
func retentionTemplate(app, dur string, required bool) corev1.PodTemplateSpec {
	ann := map[string]string{annReservation: dur}
	if required {
		ann[annPlacement] = contract.PlacementRequired
	}
	tmpl := stickyPodTemplate(app, ann)
	tmpl.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	return tmpl
}

// onNode pins tmpl's pods to node.
func onNode(tmpl corev1.PodTemplateSpec, node string) corev1.PodTemplateSpec {
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	return tmpl
}

// spread places tmpl's pods one per node.
func spread(tmpl corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	tmpl.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}}}
	return tmpl
}

// retentionPolicy is a PVC retention policy.
func retentionPolicy(whenScaled, whenDeleted string) *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	return &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenScaled: appsv1.PersistentVolumeClaimRetentionPolicyType(whenScaled), WhenDeleted: appsv1.PersistentVolumeClaimRetentionPolicyType(whenDeleted)}
}

// policyOf says s's retention policy.
func policyOf(s *appsv1.StatefulSet) string {
	p := s.Spec.PersistentVolumeClaimRetentionPolicy
	if p == nil {
		return "no policy: Retain, Retain"
	}
	return fmt.Sprintf("whenScaled %s, whenDeleted %s", p.WhenScaled, p.WhenDeleted)
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

// setUID is StatefulSet ns/name's UID.
func (c *cluster) setUID(ns, name string) types.UID {
	c.t.Helper()
	s, err := c.client.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return s.UID
}

func controllerOf(p *corev1.Pod) *metav1.OwnerReference {
	if p == nil {
		return nil
	}
	return metav1.GetControllerOf(p)
}

// waitMembers waits until StatefulSet name's pods name-0 … name-(n-1) run
// Ready, each with an address its node's runtime reports, and returns them
// by pod name.
func (c *cluster) waitMembers(ns, name string, n int) map[string]placedPod {
	t := c.t
	t.Helper()
	var out map[string]placedPod
	eventually(t, fmt.Sprintf("%d pods of StatefulSet %s/%s Ready", n, ns, name), 3*time.Minute, 500*time.Millisecond, func() (bool, string) {
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

// retentionOf is the controller's account of m's claim in its node's
// record (nil: none).
func (c *cluster) retentionOf(m placedPod) *placementv1.Retention {
	if cl := c.claimOf(m.Node, retentionNamespace, m.Name); cl != nil && string(cl.PodUID) == m.UID {
		return cl.StatefulSet
	}
	return nil
}

// waitFollowed waits until the controller judged m's claim (its
// StatefulSet's current UID, Hold) and m's node follows it: `stickyip
// list` shows m's allocation following the StatefulSet with the
// controller's why, and m's entry is published running.
func (c *cluster) waitFollowed(m placedPod) {
	t := c.t
	t.Helper()
	set, _, _ := contract.StatefulSetOf(m.Name)
	uid := c.setUID(retentionNamespace, set)
	var why string
	c.waitEntry(m.Node, m.IP, m.Name+" follows StatefulSet "+set+" as the controller says", func(e admin.Entry) bool {
		r := c.retentionOf(m)
		if r == nil || r.UID != uid || r.Verdict != placementv1.Hold {
			return false
		}
		why = r.Why
		return e.State == "allocated" && e.Name == m.Name && e.StatefulSet != nil && e.StatefulSet.Name == set &&
			e.StatefulSet.UID == string(uid) && e.StatefulSet.Why == r.Why
	})
	eventually(t, m.Name+"'s entry published", time.Minute, 500*time.Millisecond, func() (bool, string) {
		e, ok := c.entriesOf(m.Node)[retentionNamespace+"/"+m.Name]
		return ok && e.Running() && e.PodUID == types.UID(m.UID), fmt.Sprintf("%+v", e)
	})
	t.Logf("%s on %s follows StatefulSet %s: %q", m.Name, m.Node, set, why)
}

// waitHeld waits until m's address is held on its node as the controller
// says (its verdict Hold, its why containing whyHas; `stickyip list`: a
// reservation with no end, following the StatefulSet, with that why in its
// keep), its entry held in the record and the index naming its node; it
// returns the list's entry.
func (c *cluster) waitHeld(m placedPod, whyHas string) admin.Entry {
	t := c.t
	t.Helper()
	var e admin.Entry
	eventually(t, fmt.Sprintf("%s's %s held on %s (the controller's why containing %q)", m.Name, m.IP, m.Node, whyHas), time.Minute, 200*time.Millisecond, func() (bool, string) {
		r := c.retentionOf(m)
		if r == nil || r.Verdict != placementv1.Hold || !strings.Contains(r.Why, whyHas) {
			return false, fmt.Sprintf("the controller's verdict %+v", r)
		}
		var listed bool
		e, listed = c.entry(m.Node, m.IP)
		if !listed || e.State != "reserved" || e.Name != m.Name || e.ExpiresAt != nil || e.DurationEndsAt == nil || e.Retention != "statefulset" ||
			e.StatefulSet == nil || e.StatefulSet.Why != r.Why || !strings.Contains(e.Keep, r.Why) {
			return false, fmt.Sprintf("`stickyip list` on %s: %+v (listed %t); the controller: %q", m.Node, e, listed, r.Why)
		}
		if pe, ok := c.entriesOf(m.Node)[retentionNamespace+"/"+m.Name]; !ok || !pe.Held {
			return false, fmt.Sprintf("entry in %s's record %+v (%t)", m.Node, pe, ok)
		}
		if h := c.hinted(retentionNamespace, m.Name); h != m.Node {
			return false, fmt.Sprintf("the index gives %s to %q", m.Name, h)
		}
		return true, ""
	})
	return e
}

// requireListSaysWhy checks that `stickyip list` on each node says, for
// every reservation a StatefulSet holds, what would end it: the
// controller's why, in its keep.
func (c *cluster) requireListSaysWhy() {
	t := c.t
	t.Helper()
	for _, n := range c.nodes {
		for _, e := range n.stickyipList(t) {
			if e.State != "reserved" || e.DurationEndsAt == nil {
				continue
			}
			if e.StatefulSet == nil || e.StatefulSet.Why == "" || !strings.Contains(e.Keep, e.StatefulSet.Why) {
				t.Errorf("%s: `stickyip list` on %s/%s's held %s says nothing of what would end it: %+v", n.name, e.Namespace, e.Name, e.IP, e)
				continue
			}
			t.Logf("%s: %s/%s %s held; keep: %s", n.name, e.Namespace, e.Name, e.IP, e.Keep)
		}
	}
}

// waitReleased waits until each member's address is free on its node and
// its entry gone from its record, each within releaseWithin of its pod's
// leaving the API; it prints how long each took. Free: `stickyip list` has
// no record of it (a held reservation released), or one cooling down with
// no identity (the pod's reservation given up before its DEL, which freed
// the address as any pod's without a reservation: only an explicit request
// of that pod takes it before its delay ends).
func (c *cluster) waitReleased(what string, ms ...placedPod) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	gone := map[string]time.Time{}
	freed := map[string]time.Time{}
	how := map[string]string{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(freed) < len(ms) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: released %v of %s within 3 minutes", what, slices.Sorted(maps.Keys(freed)), describeMembers(byName(ms)))
		}
		for _, m := range ms {
			if _, ok := freed[m.Name]; ok {
				continue
			}
			if _, ok := gone[m.Name]; !ok {
				p, err := c.client.CoreV1().Pods(retentionNamespace).Get(ctx, m.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || (err == nil && string(p.UID) != m.UID) {
					gone[m.Name] = time.Now()
				}
			}
			if e, listed := c.entry(m.Node, m.IP); !listed || (e.State == "cooling" && e.Name == "") {
				freed[m.Name], how[m.Name] = time.Now(), "free"
				if listed {
					how[m.Name] = "freed by its DEL (cooling down until " + e.ExpiresAt.Format(time.RFC3339) + ")"
				}
				continue
			}
			if at, ok := gone[m.Name]; ok && time.Since(at) > releaseWithin {
				e, _ := c.entry(m.Node, m.IP)
				t.Fatalf("%s: %s's %s on %s not free %s after its pod left the API: %+v", what, m.Name, m.IP, m.Node, releaseWithin, e)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range ms {
		took := "before its pod left the API"
		if at, ok := gone[m.Name]; ok {
			took = freed[m.Name].Sub(at).Round(100*time.Millisecond).String() + " after its pod left the API"
		}
		t.Logf("%s: %s's %s on %s %s %s", what, m.Name, m.IP, m.Node, how[m.Name], took)
		c.waitNoLine(retentionNamespace, m.Name, m.Node)
	}
}

func byName(ms []placedPod) map[string]placedPod {
	out := map[string]placedPod{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

// requireTaken shows m's released address is free for anyone: a new pod
// on its node asking for it (stickyip.io/ips) gets it.
func (c *cluster) requireTaken(ns string, m placedPod) {
	t := c.t
	t.Helper()
	taker := testPod("taker", map[string]string{contract.AnnotationIPs: m.IP})
	taker.Namespace, taker.Spec.NodeName = ns, m.Node
	if _, err := c.client.CoreV1().Pods(ns).Create(context.Background(), taker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := c.node(m.Node).waitPodRunningIn(ns, "taker", 2*time.Minute); got != m.IP {
		t.Fatalf("a new pod asking for %s's released %s got %s", m.Name, m.IP, got)
	}
	t.Logf("a new pod asking for %s's released %s on %s got it", m.Name, m.IP, m.Node)
	c.deletePod(ns, "taker")
}

// editPolicy sets StatefulSet name's retention policy once its scaled-away
// members are gone, and waits until the controller judged running member
// by it (the owner of its volume claims changed: the controller saw the
// edit) and running's node follows that verdict (its next passes saw the
// new status).
func (c *cluster) editPolicy(ns, name string, running placedPod, whenScaled, whenDeleted string) {
	t := c.t
	t.Helper()
	before := c.retentionOf(running)
	patch := fmt.Sprintf(`{"spec":{"persistentVolumeClaimRetentionPolicy":{"whenScaled":%q,"whenDeleted":%q}}}`, whenScaled, whenDeleted)
	if _, err := c.client.AppsV1().StatefulSets(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var after *placementv1.Retention
	c.waitEntry(running.Node, running.IP, running.Name+" following the edited policy", func(e admin.Entry) bool {
		after = c.retentionOf(running)
		return after != nil && before != nil && after.Owner != before.Owner && e.StatefulSet != nil && e.StatefulSet.Why == after.Why
	})
	t.Logf("StatefulSet %s's policy edited to whenScaled %s, whenDeleted %s after its scale-down: the controller's account of %s went from %q to %q, and %s follows it",
		name, whenScaled, whenDeleted, running.Name, before.Why, after.Why, running.Node)
}

// waitControlEnded waits until the control's reservation (its address
// ctlIP on n, deleted at the scale-down) is gone, `stickyip gc` run on n
// at each try: past its own duration.
func (c *cluster) waitControlEnded(n *node, ctlIP string, scaled time.Time) {
	c.t.Helper()
	eventually(c.t, "the control's "+retentionKeep.String()+" reservation of "+ctlIP+" ended", retentionKeep+time.Minute, time.Second, func() (bool, string) {
		n.stickyipTool("gc")
		e, listed := c.entry(n.name, ctlIP)
		return !listed, fmt.Sprintf("%+v, %s after the scale-down", e, time.Since(scaled).Round(time.Second))
	})
}

// recreatedAtOnce deletes StatefulSet name (whenDeleted Delete, its
// members ms on one node) and creates it again at once: the new members
// must get new addresses, the old ones released. From the node's logs
// (the plugin's and checkpointd's, one clock) it prints, for each member,
// when its old pod's DEL ran, when checkpointd released the address and
// when the new pod's ADD ran.
func (c *cluster) recreatedAtOnce(ns, name string, ms ...placedPod) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	s, err := c.client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	background := metav1.DeletePropagationBackground
	deleted := time.Now()
	if err := c.client.AppsV1().StatefulSets(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	again := statefulSetOf(ns, name, *s.Spec.Replicas, s.Spec.Template, s.Spec.PersistentVolumeClaimRetentionPolicy)
	var created time.Time
	eventually(t, "StatefulSet "+name+" created again", 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, err := c.client.AppsV1().StatefulSets(ns).Create(ctx, again, metav1.CreateOptions{})
		created = time.Now()
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("StatefulSet %s (uid %s, whenDeleted Delete) deleted and created again %s later", name, s.UID, created.Sub(deleted).Round(time.Millisecond))
	old := map[string]bool{}
	for _, m := range ms {
		old[m.UID] = true
	}
	var now map[string]placedPod
	eventually(t, "StatefulSet "+name+"'s new members Ready", 3*time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := c.waitMembersOnce(ns, name)
		for _, m := range ms {
			if p, ok := got[m.Name]; !ok || old[p.UID] {
				return false, describeMembers(got)
			}
		}
		now = got
		return true, ""
	})
	for _, m := range ms {
		n := c.node(m.Node)
		race := n.raceOf(ns, m, now[m.Name], deleted)
		t.Logf("re-created at once: %s: old %s on %s, new %s on %s; %s", m.Name, m.IP, m.Node, now[m.Name].IP, now[m.Name].Node, race)
		if now[m.Name].IP == m.IP {
			t.Errorf("StatefulSet %s deleted (whenDeleted Delete) and created again: its new %s got the old pod's %s on %s (%s)", name, m.Name, m.IP, m.Node, race)
		}
		if e, listed := c.entry(m.Node, m.IP); listed && now[m.Name].IP != m.IP && (e.State != "cooling" || e.Name != "") {
			t.Errorf("%s's old %s on %s still kept after its StatefulSet's deletion: %+v", m.Name, m.IP, m.Node, e)
		}
	}
}

// waitMembersOnce returns the Ready pods of StatefulSet name as they run
// now (those placed: see placed).
func (c *cluster) waitMembersOnce(ns, name string) map[string]placedPod {
	got := map[string]placedPod{}
	pods, err := c.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return got
	}
	for _, p := range pods.Items {
		if pp, ok, _ := c.placed(context.Background(), &p); ok {
			got[p.Name] = pp
		}
	}
	return got
}

// followingOff is "off means off", with a held reservation on each node
// (a, b: StatefulSet off's members, one per node): a's checkpointd
// restarted with --follow-statefulsets=false, then the nodes' grant
// removed and b's restarted (its record refused): every reservation held
// on each then lasts its own duration from that moment, as `stickyip list`
// says. The grant is put back and both restarted as the step found them.
func (c *cluster) followingOff(a, b placedPod) {
	t := c.t
	t.Helper()
	if a.Node == b.Node {
		t.Fatalf("StatefulSet off's members both on %s: the spread constraint did not hold", a.Node)
	}
	na, nb := c.node(a.Node), c.node(b.Node)
	c.expiredFromNow(na, retention.WhyOff, a, func() {
		na.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
		na.startCheckpointd("CHECKPOINTD_FOLLOW_STATEFULSETS=false")
	})
	c.expiredFromNow(nb, retention.WhyRefused, b, func() {
		c.kubectl("delete", "clusterrolebinding", nodesGrant)
		nb.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
		nb.startCheckpointd()
	})
	_, nodes := placementDirs(t)
	c.kubectl("apply", "-k", nodes)
	for _, n := range []*node{na, nb} {
		n.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
		n.startCheckpointd()
	}
	for _, n := range c.nodes {
		c.waitPublisherSettled(n)
	}
}

// expiredFromNow runs stop (what stops n's following) and checks that
// every reservation n held before (m's among them) then lasts its own
// duration from that moment: no longer held, its end within stop's window
// plus its duration, `stickyip list` giving why (the reason following
// stopped).
func (c *cluster) expiredFromNow(n *node, why string, m placedPod, stop func()) {
	t := c.t
	t.Helper()
	held := map[string]admin.Entry{}
	for _, e := range n.stickyipList(t) {
		if e.State == "reserved" && e.DurationEndsAt != nil {
			held[e.IP] = e
		}
	}
	if _, ok := held[m.IP]; !ok {
		t.Fatalf("%s: %s's %s is not held before following stops: %v", n.name, m.Name, m.IP, slices.Sorted(maps.Keys(held)))
	}
	from := time.Now()
	stop()
	eventually(t, n.name+": every held reservation lasting its own duration from now", time.Minute, 200*time.Millisecond, func() (bool, string) {
		for ip := range held {
			e, listed := c.entry(n.name, ip)
			if listed && (e.ExpiresAt == nil || !strings.Contains(e.Keep, why)) {
				return false, fmt.Sprintf("%s/%s %s: %+v", e.Namespace, e.Name, ip, e)
			}
		}
		return true, ""
	})
	to := time.Now()
	for _, ip := range slices.Sorted(maps.Keys(held)) {
		before := held[ip]
		e, listed := c.entry(n.name, ip)
		if !listed {
			t.Logf("%s: %s/%s's %s ended already (its %s from %s)", n.name, before.Namespace, before.Name, ip, before.Duration, from.Format(time.RFC3339))
			continue
		}
		d, err := time.ParseDuration(e.Duration)
		if err != nil {
			t.Fatalf("%s: %s/%s's duration %q: %v", n.name, e.Namespace, e.Name, e.Duration, err)
		}
		if e.ExpiresAt.Before(from.Add(d).Truncate(time.Second)) || e.ExpiresAt.After(to.Add(d)) {
			t.Errorf("%s: %s/%s's %s ends %s, want its %s from between %s and %s", n.name, e.Namespace, e.Name, ip,
				e.ExpiresAt.Format(time.RFC3339Nano), d, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
		}
		t.Logf("%s: %s/%s's %s, held before, now ends %s; `stickyip list`: %s", n.name, e.Namespace, e.Name, ip, e.ExpiresAt.Format(time.RFC3339), e.Keep)
	}
}

// statefulSetReaders checks, from the API server's audit log, that no
// node's credentials made a StatefulSet request between from and to, and
// prints the controller's: its one watch, renewed by client-go every 5 to
// 10 minutes (no get, no poll).
func (c *cluster) statefulSetReaders(from, to time.Time) {
	t := c.t
	t.Helper()
	nodes := c.auditStatefulSetRequests(func(user string) bool { return strings.HasPrefix(user, "system:node:") }, from, to)
	for _, n := range c.nodes {
		t.Logf("%s: StatefulSet requests in this step (%s): %v", n.name, to.Sub(from).Round(time.Second), nodes[nodeUser(n.name)])
	}
	for user, verbs := range nodes {
		t.Errorf("%s made StatefulSet requests in the step: %v; nodes read no StatefulSet", user, verbs)
	}
	since := c.placementControllerStarted()
	ctl := c.auditStatefulSetRequests(func(user string) bool { return user == placementControllerUser }, since, to)[placementControllerUser]
	step := c.auditStatefulSetRequests(func(user string) bool { return user == placementControllerUser }, from, to)[placementControllerUser]
	renewals := 1 + int(to.Sub(since)/(5*time.Minute))
	t.Logf("stickyip-controller: StatefulSet requests since its start (%s ago): %v; in this step: %v", to.Sub(since).Round(time.Second), ctl, step)
	if ctl["watch"] < 1 || ctl["watch"] > renewals || ctl["get"] != 0 || sum(ctl) != ctl["watch"]+ctl["list"] || ctl["list"] > 1 {
		t.Errorf("stickyip-controller's StatefulSet requests since its start: %v; want one list at most and one watch (renewed at most %d times), no get", ctl, renewals-1)
	}
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
	eventually(c.t, what, time.Minute, 200*time.Millisecond, func() (bool, string) {
		var listed bool
		e, listed = c.entry(node, ip)
		return listed && ok(e), fmt.Sprintf("%s's entry of %s: %+v (listed %v)", node, ip, e, listed)
	})
	return e
}

// waitNoLine waits until node's record no longer lists identity.
func (c *cluster) waitNoLine(ns, identity, node string) {
	c.t.Helper()
	eventually(c.t, node+" releases its entry of "+ns+"/"+identity, time.Minute, 200*time.Millisecond, func() (bool, string) {
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

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
