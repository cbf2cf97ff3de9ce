//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// placementWeight is the weight deploy/placement/placement-policy.yaml
// documents for its preferred node affinity term.
const placementWeight = 100

// annPlacement is contract.AnnotationPlacement, spelled as pod authors do.
const annPlacement = "stickyip.io/placement"

// hints checks the placement policy's answer for a new pod in namespace
// db, where the controller indexed node1's db-0 and node2's
// identity:queue; then that the latest pod of an identity wins.
func (n *node) hints() {
	t := n.t
	ctx := context.Background()
	eventually(t, "placement policy in force", time.Minute, time.Second, func() (bool, string) {
		pf, _ := n.hintFor(unboundPod("db", "", map[string]string{annReservation: "10", annIdentity: "queue"}))
		return len(pf) == 1, fmt.Sprint(pf)
	})
	n.deletePodNowIn("db", "db-0") // as a StatefulSet pod is before its re-creation
	eventually(t, "pod db/db-0 gone", time.Minute, 200*time.Millisecond, func() (bool, string) {
		_, err := n.client.CoreV1().Pods("db").Get(ctx, "db-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	own := corev1.PreferredSchedulingTerm{Weight: 7, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}
	linux := corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}
	notNode9 := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node9"}}
	required := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{linux}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{linux}, MatchFields: []corev1.NodeSelectorRequirement{notNode9}}}}
	on := func(node string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	}
	term := func(node string) corev1.PreferredSchedulingTerm {
		return corev1.PreferredSchedulingTerm{Weight: placementWeight, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{on(node)}}}
	}
	ours, theirs := term(nodeName), term(node2Name)
	withOwn := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: required.DeepCopy(), PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{own}}}
		return p
	}
	antiOnly := func(p *corev1.Pod) *corev1.Pod { // an affinity with no nodeAffinity
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 3, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}}
		return p
	}
	req := map[string]string{annReservation: "10", annPlacement: "required"}
	andOurs := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{linux}, MatchFields: []corev1.NodeSelectorRequirement{on(nodeName)}},
		{MatchExpressions: []corev1.NodeSelectorRequirement{linux}, MatchFields: []corev1.NodeSelectorRequirement{notNode9, on(nodeName)}}}}
	for _, c := range []struct {
		name      string
		pod       *corev1.Pod
		preferred []corev1.PreferredSchedulingTerm // nil: none
		required  *corev1.NodeSelector             // nil: none
	}{
		{"statefulset pod, own affinity kept", withOwn(unboundPod("db", "db-0", map[string]string{annReservation: "10"})),
			[]corev1.PreferredSchedulingTerm{own, ours}, required},
		{"pod anti-affinity only, kept", antiOnly(unboundPod("db", "db-0", map[string]string{annReservation: "10"})), []corev1.PreferredSchedulingTerm{ours}, nil},
		{"no affinity of its own", unboundPod("db", "db-0", map[string]string{annReservation: "90s"}), []corev1.PreferredSchedulingTerm{ours}, nil},
		{"placement: preferred, said", unboundPod("db", "db-0", map[string]string{annReservation: "90s", annPlacement: "preferred"}), []corev1.PreferredSchedulingTerm{ours}, nil},
		{"placement: required, no terms of its own: one", unboundPod("db", "db-0", req), nil,
			&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{on(nodeName)}}}}},
		{"placement: required, ANDed into each of its own terms", withOwn(unboundPod("db", "db-0", req)), []corev1.PreferredSchedulingTerm{own}, andOurs},
		{"identity, generateName, held by node2", unboundPod("db", "", map[string]string{annReservation: "5m", annIdentity: "queue"}),
			[]corev1.PreferredSchedulingTerm{theirs}, nil},
		{"a pod named as the identity's key is another identity", unboundPod("db", "queue", map[string]string{annReservation: "90s"}), nil, nil},
		{"stickyip.io/identity: db-0 is not the pod db-0", unboundPod("db", "", map[string]string{annReservation: "10", annIdentity: "db-0"}), nil, nil},
		{"no reservation annotation", withOwn(unboundPod("db", "db-0", nil)), []corev1.PreferredSchedulingTerm{own}, required},
		{"reservation 0", unboundPod("db", "db-0", map[string]string{annReservation: "0"}), nil, nil},
		{"reservation 0s", unboundPod("db", "db-0", map[string]string{annReservation: "0s"}), nil, nil},
		{"another identity", unboundPod("db", "db-1", map[string]string{annReservation: "10"}), nil, nil},
		{"same name, another namespace", unboundPod("default", "db-0", map[string]string{annReservation: "10"}), nil, nil},
	} {
		n.checkHint(c.name, c.pod, c.preferred, c.required)
	}
	_, err := n.hintFor(unboundPod("db", "db-0", map[string]string{annReservation: "10", annPlacement: "requird"}))
	requireRefused(t, "a pod with stickyip.io/placement: requird", err, `want "required"`)

	// The latest pod wins: db-0 is created again, bound to node2 (nothing
	// runs it), node2 claims it, and the index gives it to node2 although
	// node1 still lists it.
	moved := testPod("db-0", nil)
	moved.Namespace, moved.Spec.NodeName = "db", node2Name
	if _, err := n.client.CoreV1().Pods("db").Create(ctx, moved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.claimAs(node2Name, n.podEntry("db", "db-0", "db-0", "10.244.2.7")); err != nil {
		t.Fatalf("node2 claiming db-0, bound to it now: %v", err)
	}
	n.deletePodNowIn("db", "db-0")
	eventually(t, "the hint names node2, whose db-0 is the later pod", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got, err := n.hintFor(unboundPod("db", "db-0", map[string]string{annReservation: "10"}))
		return err == nil && fmt.Sprint(got) == fmt.Sprint([]corev1.PreferredSchedulingTerm{theirs}), fmt.Sprint(got, err)
	})
	if c := n.claimOf(nodeName, "db", "db-0"); c == nil || !c.Accepted() || c.Indexed {
		t.Errorf("node1's claim of db-0 after node2's later pod: %+v, want accepted and not indexed", c)
	}
	t.Log("hint: of node1's and node2's claims of db-0, node2's, whose pod is the later")
	// node2's reservation ends: node1's earlier claim counts again.
	n.releaseAs(node2Name, "db", "db-0")
	n.waitHinted("db", "db-0", nodeName, 30*time.Second)
	t.Log("hint: node2's entry of db-0 released: node1's earlier claim counts again")
}

// nodeRemoved deletes Node node2: its entries leave the index within
// seconds, and the controller deletes its record.
func (n *node) nodeRemoved() {
	t := n.t
	start := time.Now()
	if err := n.client.CoreV1().Nodes().Delete(context.Background(), node2Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitHinted("db", "identity:queue", "", 30*time.Second)
	t.Logf("node2's Node deleted: its entries out of the index %v later", time.Since(start).Round(100*time.Millisecond))
	eventually(t, "node2's record deleted by the controller", 2*time.Minute, time.Second, func() (bool, string) {
		return n.recordOf(node2Name) == nil, "still there"
	})
}

// hintFor returns the preferred node affinity terms pod gets from the
// mutating admission policies (a server-side dry-run create), and the
// API server's refusal, if any.
func (n *node) hintFor(pod *corev1.Pod) ([]corev1.PreferredSchedulingTerm, error) {
	got, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, err
	}
	if a := got.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		return a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, nil
	}
	return nil, nil
}

// checkHint creates pod through the API (a server-side dry run: the
// mutating admission policies run, nothing is stored) and checks the
// preferred and required node affinity it gets, and that the rest of its
// own affinity is kept.
func (n *node) checkHint(name string, pod *corev1.Pod, preferred []corev1.PreferredSchedulingTerm, required *corev1.NodeSelector) {
	t := n.t
	t.Helper()
	got, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Errorf("%s: create: %v", name, err)
		return
	}
	var terms []corev1.PreferredSchedulingTerm
	if a := got.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		terms = a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	}
	if own := pod.Spec.Affinity; own != nil {
		if a := got.Spec.Affinity; a == nil || fmt.Sprint(a.PodAntiAffinity) != fmt.Sprint(own.PodAntiAffinity) {
			t.Errorf("%s: the pod's own affinity changed: %v, was %v", name, a, own)
		}
	}
	switch {
	case fmt.Sprint(terms) != fmt.Sprint(preferred):
		t.Errorf("%s: preferred terms %v, want %v", name, terms, preferred)
	case fmt.Sprint(requiredOf(got.Spec.Affinity)) != fmt.Sprint(required):
		t.Errorf("%s: required %v, want %v", name, requiredOf(got.Spec.Affinity), required)
	case preferred == nil && required == nil && got.Spec.Affinity != nil && pod.Spec.Affinity == nil:
		t.Errorf("%s: affinity %v added, want none", name, got.Spec.Affinity)
	default:
		t.Logf("hint: %s: preferred %v, required %v", name, terms, requiredOf(got.Spec.Affinity))
	}
}

// unboundPod is a pod no node runs (no scheduler here): for admission only.
func unboundPod(ns, name string, annotations map[string]string) *corev1.Pod {
	p := testPod(name, annotations)
	p.Namespace, p.Spec.NodeName = ns, ""
	if name == "" {
		p.GenerateName = "cache-"
	}
	return p
}

// requiredOf is a's required node affinity, nil when it has none.
func requiredOf(a *corev1.Affinity) *corev1.NodeSelector {
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

// hasOnly reports whether p's node affinity is exactly the hint's term for
// node: the preferred one, or with required a required term of it alone.
func hasOnly(p *corev1.Pod, node string, required bool) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return false
	}
	want := []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}
	if required {
		r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		return a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution == nil && r != nil && len(r.NodeSelectorTerms) == 1 &&
			fmt.Sprint(r.NodeSelectorTerms[0].MatchFields) == fmt.Sprint(want) && len(r.NodeSelectorTerms[0].MatchExpressions) == 0
	}
	terms := a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(terms) == 1 && terms[0].Weight == placementWeight &&
		fmt.Sprint(terms[0].Preference.MatchFields) == fmt.Sprint(want)
}
