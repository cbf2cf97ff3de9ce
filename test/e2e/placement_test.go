//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/test/harness"
)

// placementWeight is the weight deploy/placement/placement-policy.yaml
// documents for its preferred node affinity term.
const placementWeight = 100

// annPlacement is contract.AnnotationPlacement, spelled as pod authors do.
const annPlacement = "stickyip.io/placement"

// TestPlacement applies deploy/placement to a real kube-apiserver
// (Node,RBAC authorization, NodeRestriction) and checks, with the nodes'
// own credentials and a namespace user's, who may write what in the
// placement index (stickyip-index-*): a node writes only its own key, claims
// a pod-name identity only for that very pod bound to it and a keyed one
// only for a pod bound to it, never through a mirror pod it made up, and
// every entry is well formed and bounded; nobody else but administrators and
// the garbage collector writes or deletes a shard, on any write path. Then
// that the placement policy gives a re-created pod with a reservation a
// preferred, or on request a required, node affinity for the node that
// claimed its identity last, keeps the pod's own terms, and leaves every
// other pod alone; and that checkpointd on the node (real kubelet,
// containerd and CNI chain) claims a sticky pod's identity at ADD, writes
// its reservation's end at DEL and releases it at expiry: three writes.
// Last, the namespace opt-in (issue 39, placement_optin_test.go).
func TestPlacement(t *testing.T) {
	n := newCheckpointdNode(t)
	ctx := context.Background()
	n.startControlPlane()
	n.ensureNamespace("db")
	n.applyPlacement()
	n.startContainerd()
	n.startKubelet(true)
	// node2 exists only as a Node object, a credential and the pods bound
	// to it (which nothing runs).
	if _, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node2Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{testPod("db-0", nil), testPod("queue-7d9f8-b", nil), testPod("own-b", nil)} {
		p.Namespace = "db"
		if p.Name != "db-0" {
			p.Spec.NodeName = node2Name
		}
		if _, err := n.client.CoreV1().Pods("db").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n.waitPodRunningIn("db", "db-0", 2*time.Minute)
	node1, node2 := n.indexWriterFor(nodeName), n.indexWriterFor(node2Name)
	dbShard, queueShard := placement.ShardOf("db-0"), placement.ShardOf("identity:queue")
	if dbShard == queueShard {
		t.Fatalf("db-0 and identity:queue share %s: the test needs them apart", dbShard)
	}
	eventually(t, "index policy in force (node2's claim of node1's pod refused)", time.Minute, time.Second, func() (bool, string) {
		err := node2.claim("db", entryLine("db-0", "db-0", "10.244.2.9"))
		if err == nil {
			n.adminDeleteShard("db", dbShard)
			return false, "accepted"
		}
		return strings.Contains(err.Error(), "claim refused:"), err.Error()
	})
	if err := node1.claim("db", entryLine("db-0", "db-0", "10.244.1.50")); err != nil {
		t.Fatalf("node1 claiming db-0, its own pod: %v", err)
	}
	if err := node2.claim("db", entryLine("identity:queue", "queue-7d9f8-b", "10.244.2.51")); err != nil {
		t.Fatalf("node2 claiming identity:queue for its pod queue-7d9f8-b: %v", err)
	}
	n.nodeAttacks(node2)
	n.namespaceUserAttacks()
	n.hints()
	n.formerPublisher(node2)
	n.publisherLifecycle()
	n.namespaceOptIn()
}

// nodeAttacks: what another node's credentials (node2, running pods
// own-b and queue-7d9f8-b of namespace db) may not do to node1's entry of
// db-0, or claim for itself; node1's entry is the same after all of it.
func (n *node) nodeAttacks(node2 *indexWriter) {
	t := n.t
	ctx := context.Background()
	dbShard := placement.ShardOf("db-0")
	before, _ := n.lineOf("db", "db-0", nodeName)
	c2 := n.clientAs(n.tokens[nodeUser(node2Name)])
	uid1 := n.nodeUID(nodeName)
	uid2 := n.nodeUID(node2Name)
	ref := func(node string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}
	}
	// Another node's key, on every write path.
	n.refusedEverywhere("node2", c2, "db", dbShard, "rewrite node1's entry of db-0 to name node2's pod own-b", func(cm *corev1.ConfigMap) {
		cm.Data[nodeName] = strings.Replace(cm.Data[nodeName], "10.244.1.50", "10.244.2.3", 1)
	})
	n.refusedEverywhere("node2", c2, "db", dbShard, "take node1's entry over under its own key", func(cm *corev1.ConfigMap) {
		l := entryLine("db-0", "db-0", "10.244.2.3")
		seq, _ := parseSeq(cm.ResourceVersion)
		l.Seq = seq
		cm.Data = map[string]string{node2Name: l.String()}
		cm.OwnerReferences = []metav1.OwnerReference{ref(node2Name, uid2)}
	})
	n.refusedEverywhere("node2", c2, "db", dbShard, "remove node1's entry", func(cm *corev1.ConfigMap) { delete(cm.Data, nodeName) })
	n.refusedEverywhere("node2", c2, "db", dbShard, "drop node1's owner reference (its entry would stop counting)", func(cm *corev1.ConfigMap) {
		cm.OwnerReferences = nil
	})
	n.refusedEverywhere("node2", c2, "db", dbShard, "label the shard", func(cm *corev1.ConfigMap) { cm.Labels["x"] = "y" })
	yes := true
	n.refusedEverywhere("node2", c2, "db", dbShard, "annotate the shard", func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"x": "y"} })
	n.refusedEverywhere("node2", c2, "db", dbShard, "put a finalizer on the shard", func(cm *corev1.ConfigMap) { cm.Finalizers = []string{"x.io/y"} })
	n.refusedEverywhere("node2", c2, "db", dbShard, "make the shard immutable", func(cm *corev1.ConfigMap) { cm.Immutable = &yes })
	n.refusedEverywhere("node2", c2, "db", dbShard, "a second reference of node1's name", func(cm *corev1.ConfigMap) {
		cm.OwnerReferences = append(cm.OwnerReferences, ref(nodeName, uid2))
	})
	n.refusedEverywhere("node2", c2, "db", dbShard, "add an entry and an owner reference for node1's Node", func(cm *corev1.ConfigMap) {
		cm.Data[node2Name] = entryLine("db-0", "db-0", "10.244.2.3").String()
		cm.OwnerReferences = append(cm.OwnerReferences, ref(node2Name, uid2), metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: uid1 + "x"})
	})
	// Claims of its own.
	requireRefused(t, "node2 claiming db-0 for its pod own-b", node2.claim("db", entryLine("db-0", "own-b", "10.244.2.3")), "the entry of a pod-name identity names that pod")
	requireRefused(t, "node2 claiming db-0, bound to node1", node2.claim("db", entryLine("db-0", "db-0", "10.244.2.3")), "claim refused:")
	requireRefused(t, "node2 claiming web-0, which never ran", node2.claim("db", entryLine("web-0", "web-0", "10.244.2.3")), "claim refused:")
	// A keyed identity belongs to every pod of the namespace that carries the
	// key: the API server cannot check the key, only that the pod is bound
	// to the writer (placement.md, "What stays possible").
	if err := node2.claim("db", entryLine("identity:anyone-may-claim", "own-b", "10.244.2.3")); err != nil {
		t.Errorf("node2 claiming a keyed identity for its pod own-b (allowed by design): %v", err)
	}
	qs := placement.ShardOf("identity:queue")
	qcur, _ := node2.api.Get(ctx, "db", qs)
	twice := qcur.Values[node2Name] + "\n" + strings.SplitN(qcur.Values[node2Name], "\n", 2)[0]
	requireRefused(t, "node2 listing one identity twice", node2.write("db", qs, twice), "each identity once")
	var many []string
	for i := 0; len(many) < placement.MaxClaims+1; i++ {
		if id := fmt.Sprintf("identity:m%d", i); placement.ShardOf(id) == qs {
			many = append(many, entryLine(id, "own-b", "10.244.2.4").String())
		}
	}
	requireRefused(t, "node2 making 13 claims in one write", node2.write("db", qs, strings.Join(many, "\n")), "at most 12")
	// A pod it makes up: NodeRestriction lets a kubelet create mirror pods
	// of any name; deploy/placement only the kubelet's <name>-<node>, and
	// no claim names such a pod.
	mirror := func(name string) *corev1.Pod {
		p := testPod(name, map[string]string{"kubernetes.io/config.mirror": "x"})
		p.Namespace, p.Spec.NodeName = "db", node2Name
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node2Name, UID: uid2, Controller: &yes}}
		return p
	}
	_, err := c2.CoreV1().Pods("db").Create(ctx, mirror("db-1"), metav1.CreateOptions{})
	requireRefused(t, "node2 creating the mirror pod db/db-1", err, "may create only mirror pods named")
	if _, err := c2.CoreV1().Pods("db").Create(ctx, mirror("web-"+node2Name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node2 creating a mirror pod named as the kubelet names them: %v", err)
	}
	requireRefused(t, "node2 claiming identity:web for its mirror pod", node2.claim("db", entryLine("identity:web", "web-"+node2Name, "10.244.2.4")), "mirror pods")
	requireRefused(t, "node2 claiming web-"+node2Name+" for its mirror pod", node2.claim("db", entryLine("web-"+node2Name, "web-"+node2Name, "10.244.2.4")), "mirror pods")
	// Entries the honest nodes could not read, or that crowd the others out.
	raw := func(what, value, want string) {
		s, err := node2.api.Get(ctx, "db", placement.ShardOf("identity:queue"))
		if err != nil {
			t.Fatal(err)
		}
		requireRefused(t, "node2 writing "+what, node2.write("db", placement.ShardOf("identity:queue"), s.Values[node2Name]+"\n"+value), want)
	}
	raw("an entry that does not parse", "identity:x own-b 5 garbage - 10.244.2.5", "an entry is")
	raw("an address that does not parse", "identity:queue queue-7d9f8-b 0 2026-11-26T00:00:00.000Z - 10.244.2.500", "an entry is")
	raw("an identity of another shard", entryLine("db-0", "db-0", "10.244.2.5").String(), "in its own shard")
	raw("20,000 characters", strings.Repeat("x", 20000), "at most 16384 characters")
	s, _ := node2.api.Get(ctx, "db", placement.ShardOf("identity:queue"))
	lines, _ := s.Lines(node2Name)
	rv, _ := parseSeq(s.RV)
	lines[0].Seq = rv + 1000 // a claim that says it is newer than anything written
	requireRefused(t, "node2 moving its claim's seq forward", node2.write("db", placement.ShardOf("identity:queue"), entry.FormatValue(lines)), "stale claim:")
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "db"}, Data: map[string]string{"x": "y"}}
	_, err = c2.CoreV1().ConfigMaps("db").Create(ctx, other, metav1.CreateOptions{})
	requireRefused(t, "node2 creating another ConfigMap", err, "")
	requireRefused(t, "node2 deleting a shard", c2.CoreV1().ConfigMaps("db").Delete(ctx, dbShard, metav1.DeleteOptions{}), "")
	// A binding that lets nodes get any pod would make every name pass the
	// authorizer's check: claims are then refused, whoever they name.
	n.grantNodesGetPods(func() {
		requireRefused(t, "node2 claiming identity:queue2 for its pod own-b while nodes may get every pod",
			node2.claim("db", entryLine("identity:queue2", "own-b", "10.244.2.6")), "nodes may get pods that are not bound to them")
	})
	if after, ok := n.lineOf("db", "db-0", nodeName); !ok || !after.Equal(before) || n.hinted("db", "db-0") != nodeName {
		t.Fatalf("db/db-0 after node2's refused writes: %+v (%v), hint %q; want node1's %+v", after, ok, n.hinted("db", "db-0"), before)
	}
	t.Log("node2: every write on node1's entry refused on every path, every claim it may not make refused; node1's entry unchanged")
}

// requirePoliciesBeforeRBAC fails the test unless the RBAC that lets nodes
// write the placement index was created after the bindings of
// deploy/placement's policies (issue 38: a line written before the index
// policy is in force was never checked). A binding's resourceVersion, never
// changed since, is etcd's order of its creation (a policy's is not: the
// API server writes its status after a type check). applyPlacement calls
// it for an install only: a later apply re-creates after the RBAC a binding
// a test removed (the hint's, the way to switch it off).
func (cp *controlPlane) requirePoliciesBeforeRBAC() {
	t := cp.t
	ctx := context.Background()
	a := cp.client.AdmissionregistrationV1()
	crb, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, "stickyip:placement-publisher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rbac, _ := parseSeq(crb.ResourceVersion)
	// Every binding deploy/placement makes (the namespace opt-in's, whose
	// hint reads the index too, among them).
	rvs := map[string]string{}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=stickyip,app.kubernetes.io/component=placement"}
	vbs, err := a.ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range vbs.Items {
		rvs["ValidatingAdmissionPolicyBinding "+b.Name] = b.ResourceVersion
	}
	mbs, err := a.MutatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range mbs.Items {
		rvs["MutatingAdmissionPolicyBinding "+b.Name] = b.ResourceVersion
	}
	for _, want := range []string{"ValidatingAdmissionPolicyBinding stickyip-placement-index", "ValidatingAdmissionPolicyBinding stickyip-placement-pods",
		"MutatingAdmissionPolicyBinding " + placementBindingName, "MutatingAdmissionPolicyBinding " + optInPolicy + "-hint"} {
		if _, ok := rvs[want]; !ok {
			t.Fatalf("%s: not among the bindings labelled %s (%v)", want, sel.LabelSelector, rvs)
		}
	}
	for what, rv := range rvs {
		if n, _ := parseSeq(rv); n >= rbac {
			t.Errorf("%s created after the nodes' RBAC (resourceVersion %s ≥ %s): nodes could write the index unchecked", what, rv, crb.ResourceVersion)
		}
	}
}

// nodeUID is the UID of Node name.
func (cp *controlPlane) nodeUID(name string) types.UID {
	nd, err := cp.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		cp.t.Fatal(err)
	}
	return nd.UID
}

// grantNodesGetPods runs f while an RBAC binding lets every node get every
// pod.
func (cp *controlPlane) grantNodesGetPods(f func()) {
	t := cp.t
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nodes-get-pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	rb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nodes-get-pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}}}
	if _, err := cp.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.client.RbacV1().ClusterRoleBindings().Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f()
	for _, err := range []error{
		cp.client.RbacV1().ClusterRoleBindings().Delete(ctx, rb.Name, metav1.DeleteOptions{}),
		cp.client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// namespaceUserAttacks: a user with every ConfigMap right in namespace db
// writes no shard, on any path, deletes none, and cannot plant one, with or
// without the index label; ordinary ConfigMaps stay theirs.
func (n *node) namespaceUserAttacks() {
	t := n.t
	ctx := context.Background()
	editor := n.namespaceEditor("db")
	dbShard := placement.ShardOf("db-0")
	n.refusedEverywhere("an editor of namespace db", editor, "db", dbShard, "point db-0's entry at node2", func(cm *corev1.ConfigMap) {
		cm.Data[nodeName] = strings.Replace(cm.Data[nodeName], "10.244.1.50", "10.244.2.3", 1)
	})
	n.refusedEverywhere("an editor of namespace db", editor, "db", dbShard, "unlabel the shard", func(cm *corev1.ConfigMap) { cm.Labels = nil })
	requireRefused(t, "an editor of namespace db deleting a shard", editor.CoreV1().ConfigMaps("db").Delete(ctx, dbShard, metav1.DeleteOptions{}),
		"is written by the nodes")
	free := ""
	for i := range placement.ShardCount {
		if name := placement.ShardName(i); len(n.shard("db", name).Values) == 0 && !n.shard("db", name).Exists {
			free = name
			break
		}
	}
	plant := func(labels map[string]string) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: free, Namespace: "db", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node2Name, UID: n.nodeUID(node2Name)}}},
			Data: map[string]string{node2Name: entryLine("db-9", "db-9", "10.244.2.9").String()}}
		_, err := editor.CoreV1().ConfigMaps("db").Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	requireRefused(t, "an editor of namespace db planting "+free+" without the index label", plant(nil), "is written by the nodes")
	requireRefused(t, "an editor of namespace db planting "+free+" with it", plant(map[string]string{placement.IndexLabel: strings.TrimPrefix(free, placement.ShardPrefix)}),
		"is written by the nodes")
	labelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-index", Namespace: "db", Labels: map[string]string{placement.IndexLabel: "3"}}}
	_, err := editor.CoreV1().ConfigMaps("db").Create(ctx, labelled, metav1.CreateOptions{})
	requireRefused(t, "an editor of namespace db creating another ConfigMap with the index label (a parameter of the hint)", err, "is written by the nodes")
	plainCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "db"}, Data: map[string]string{"k": "v"}}
	if _, err := editor.CoreV1().ConfigMaps("db").Create(ctx, plainCM, metav1.CreateOptions{}); err != nil {
		t.Errorf("an editor of namespace db creating an ordinary ConfigMap: %v", err)
	}
}

// hints checks the placement policy's answer for a new pod in namespace db,
// where node1 claimed db-0 and node2 identity:queue.
func (n *node) hints() {
	t := n.t
	ctx := context.Background()
	eventually(t, "placement policy in force", time.Minute, time.Second, func() (bool, string) {
		pf, _ := n.hintFor(unboundPod("db", "", map[string]string{annReservation: "10", annIdentity: "queue"}))
		return len(pf) == 1, fmt.Sprint(pf)
	})
	// db-0 is deleted, as a StatefulSet pod is before its re-creation.
	zero := int64(0)
	if err := n.client.CoreV1().Pods("db").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
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
	cases := []struct {
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
	}
	for _, c := range cases {
		n.checkHint(c.name, c.pod, c.preferred, c.required)
	}
	_, err := n.hintFor(unboundPod("db", "db-0", map[string]string{annReservation: "10", annPlacement: "requird"}))
	requireRefused(t, "a pod with stickyip.io/placement: requird", err, `want "required"`)

	// The latest claim wins: db-0 runs on node2 now (bound, nothing runs
	// it), node2 claims it, and the hint names node2 although node1's
	// entry is still there.
	moved := testPod("db-0", nil)
	moved.Namespace, moved.Spec.NodeName = "db", node2Name
	if _, err := n.client.CoreV1().Pods("db").Create(ctx, moved, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.indexWriterFor(node2Name).claim("db", entryLine("db-0", "db-0", "10.244.2.7")); err != nil {
		t.Fatalf("node2 claiming db-0, bound to it now: %v", err)
	}
	if err := n.client.CoreV1().Pods("db").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the hint names node2, which claimed db-0 last", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got, err := n.hintFor(unboundPod("db", "db-0", map[string]string{annReservation: "10"}))
		return err == nil && fmt.Sprint(got) == fmt.Sprint([]corev1.PreferredSchedulingTerm{theirs}), fmt.Sprint(got, err)
	})
	t.Log("hint: of node1's and node2's entries of db-0, node2's, the later claim")
	// A Node that is gone: the garbage collector drops its owner reference
	// (done by hand here: no controller-manager runs), and its entries stop
	// counting at once.
	queueShard := placement.ShardOf("identity:queue")
	if _, err := n.client.CoreV1().ConfigMaps("db").Patch(ctx, queueShard, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no hint from a node that no longer owns the shard", 30*time.Second, 500*time.Millisecond, func() (bool, string) {
		got, err := n.hintFor(unboundPod("db", "", map[string]string{annReservation: "5m", annIdentity: "queue", annPlacement: "required"}))
		return err == nil && len(got) == 0, fmt.Sprint(got, err)
	})
	t.Log("hint: identity of a node that no longer owns the shard: none")
	n.adminDeleteShard("db", placement.ShardOf("db-0"))
	n.adminDeleteShard("db", queueShard)
}

// publisherLifecycle: checkpointd on node1 with the real CNI chain claims a
// sticky pod's identity at its ADD, writes its reservation's end at DEL and
// releases it at expiry, and writes nothing for a plain pod.
func (n *node) publisherLifecycle() {
	t := n.t
	n.startCheckpointd()
	const reserve = 20 * time.Second
	start := time.Now()
	n.createPod(testPod("web", map[string]string{annReservation: reserve.String()}))
	n.createPod(testPod("plain", nil))
	ip := n.waitAPIPodRunning("web", 2*time.Minute)
	n.waitAPIPodRunning("plain", 2*time.Minute)
	var claimed time.Duration
	eventually(t, "entry of default/web", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		l, ok := n.lineOf("default", "web", nodeName)
		if !ok {
			return false, "no entry yet"
		}
		claimed = time.Since(start)
		owners := n.ownersOf("default", placement.ShardOf("web"))
		if l.Pod != "web" || fmt.Sprint(l.IPs) != "["+ip+"]" || !l.Running() || fmt.Sprint(owners) != "["+nodeName+"]" {
			return false, fmt.Sprintf("entry %+v, owners %v", l, owners)
		}
		return true, ""
	})
	t.Logf("publisher: default/web (%s) claimed, %s after the pod's creation", ip, claimed.Round(100*time.Millisecond))
	if l, ok := n.lineOf("default", "plain", nodeName); ok {
		t.Errorf("a pod without reservation got an entry: %+v", l)
	}
	n.deletePodGracefully("web", time.Minute)
	deleted := time.Now()
	expires := deleted.Add(reserve)
	eventually(t, "the reservation's end in default/web's entry", reserve/2, 200*time.Millisecond, func() (bool, string) {
		l, ok := n.lineOf("default", "web", nodeName)
		return ok && !l.Running() && l.Until.After(deleted.Add(reserve-5*time.Second)) && l.Until.Before(deleted.Add(reserve+5*time.Second)),
			fmt.Sprintf("%+v", l)
	})
	eventually(t, "entry of default/web released at expiry", reserve+30*time.Second, 500*time.Millisecond, func() (bool, string) {
		l, ok := n.lineOf("default", "web", nodeName)
		owners := n.ownersOf("default", placement.ShardOf("web"))
		return !ok && len(owners) == 0, fmt.Sprintf("%+v owners %v", l, owners)
	})
	t.Logf("publisher: entry and owner reference released %s after expiry", time.Since(expires).Round(100*time.Millisecond))
	writes := map[string]string{}
	for _, kind := range []string{placement.WriteClaim, placement.WriteUpdate, placement.WriteRelease} {
		v, err := n.metric(`checkpointd_placement_writes_total{kind="` + kind + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		writes[kind] = v
	}
	if writes[placement.WriteClaim] != "1" || writes[placement.WriteUpdate] != "1" || writes[placement.WriteRelease] != "1" {
		t.Errorf("API writes for one sticky pod's lifecycle and one plain pod: %v, want one claim, one update (DEL), one release", writes)
	}
	t.Logf("publisher: API writes for one sticky pod lifecycle (ADD, DEL, expiry) and one plain pod: %v", writes)
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

func (cp *controlPlane) dynamicAs(token string) dynamic.Interface {
	c, err := dynamic.NewForConfig(cp.apiClientConfig(token))
	if err != nil {
		cp.t.Fatal(err)
	}
	return c
}

// clientAs is a client with token's identity.
func (cp *controlPlane) clientAs(token string) kubernetes.Interface {
	c, err := kubernetes.NewForConfig(cp.apiClientConfig(token))
	if err != nil {
		cp.t.Fatal(err)
	}
	return c
}

// namespaceEditor returns a client for a service account of ns that may
// create, read and change the namespace's ConfigMaps: a user of the
// namespace, no administrator.
func (cp *controlPlane) namespaceEditor(ns string) kubernetes.Interface {
	t := cp.t
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmap-editor", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}
	if _, err := cp.client.RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cp.boundServiceAccount(ns, "editor", rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name})
}

// kubectlPath is the kubectl the e2e build made, "" when there is none
// (E2E_K8S=1.36 builds none).
func (cp *controlPlane) kubectlPath() string {
	if p := filepath.Join(cp.bins.k8s, "kubectl"); fileExists(p) {
		return p
	}
	return ""
}

// applyPlacement installs deploy/placement as docs/install.md says: the
// policies, then, once a dry run shows the index policy in effect
// (waitIndexPolicy), deploy/placement/nodes (the RBAC that lets nodes write
// the index); with kubectl (apply -k, after a server-side dry run) when it
// is built, else the way `kubectl apply -f` does it (every *.yaml file), by
// server-side apply through the API.
func (cp *controlPlane) applyPlacement() {
	t := cp.t
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "placement")
	nodes := filepath.Join(dir, "nodes")
	if cp.kubectlPath() != "" {
		// The order is an install's: a later apply (a test restoring a
		// binding it deleted) re-creates a binding after the RBAC.
		_, err := cp.client.RbacV1().ClusterRoleBindings().Get(context.Background(), "stickyip:placement-publisher", metav1.GetOptions{})
		installed := err == nil
		t.Logf("kubectl apply --dry-run=server -f %s:\n%s", dir, cp.kubectl("apply", "--dry-run=server", "-f", dir))
		out := cp.kubectl("apply", "-k", dir)
		t.Logf("kubectl apply -k %s:\n%s", dir, out)
		t.Logf("the index policy in effect after %v (a dry run refused)", cp.waitIndexPolicy().Round(time.Millisecond))
		grant := cp.kubectl("apply", "-k", nodes)
		t.Logf("kubectl apply -k %s:\n%s", nodes, grant)
		if !installed {
			cp.requirePoliciesBeforeRBAC()
		}
		// Applying the manifests again changes nothing: every field the API
		// server would default is spelled out (a list such as resourceRules is
		// atomic, so a defaulted field in it made kubectl rewrite it each time).
		for _, line := range strings.Split(strings.TrimSpace(out+"\n"+grant), "\n") {
			if strings.HasSuffix(line, " configured") {
				t.Errorf("kubectl apply -k of unchanged manifests changed %s", strings.TrimSuffix(line, " configured"))
			}
		}
	} else {
		cp.applyFiles(dir)
		t.Logf("the index policy in effect after %v (a dry run refused)", cp.waitIndexPolicy().Round(time.Millisecond))
		cp.applyFiles(nodes)
	}
	eventually(t, "placement policies in the API", time.Minute, time.Second, func() (bool, string) {
		_, err := cp.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(context.Background(), placementBindingName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// applyFiles applies every *.yaml file of dir as `kubectl apply -f dir`
// does, by server-side apply through the API as admin.
func (cp *controlPlane) applyFiles(dir string) {
	t := cp.t
	t.Helper()
	files := manifestFiles(t, dir)
	admin := cp.dynamicAs(cp.adminToken)
	for _, f := range files {
		for _, u := range manifestObjects(t, f) {
			gvr := resourceOf(t, u)
			js, _ := u.MarshalJSON()
			force := true
			eventually(t, "apply "+u.GetKind()+" "+u.GetName(), time.Minute, time.Second, func() (bool, string) {
				_, err := admin.Resource(gvr).Patch(context.Background(), u.GetName(), types.ApplyPatchType, js,
					metav1.PatchOptions{FieldManager: "kubectl", Force: &force})
				return err == nil, fmt.Sprint(err)
			})
			t.Logf("applied %s %s (%s)", u.GetKind(), u.GetName(), filepath.Base(f))
		}
	}
}

// manifestFiles are the *.yaml files of dir, as `kubectl apply -f dir`
// reads them; none is a failure.
func manifestFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no manifests (%v)", dir, err)
	}
	return files
}

// manifestObjects are the objects of manifest file f, in its order.
func manifestObjects(t testing.TB, f string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, u)
	}
	return out
}

// probeRefused is what the index policy answers to the creation of a
// ConfigMap named stickyip-placement-probe (docs/install.md).
const probeRefused = "stickyip-placement-probe is refused"

// waitIndexPolicy waits until the index policy is in effect, as
// docs/install.md has an administrator see it: a dry run of the creation of
// a ConfigMap named stickyip-placement-probe is refused by it (with
// kubectl when it is built: the documented command); it returns how long
// that took.
func (cp *controlPlane) waitIndexPolicy() time.Duration {
	t := cp.t
	t.Helper()
	start := time.Now()
	eventually(t, "the index policy in effect (a dry run of stickyip-placement-probe refused)", time.Minute, 100*time.Millisecond, func() (bool, string) {
		var out string
		if cp.kubectlPath() != "" {
			out, _ = cp.kubectlErr("create", "configmap", "stickyip-placement-probe", "--dry-run=server", "-o", "name")
		} else {
			_, err := cp.client.CoreV1().ConfigMaps("default").Create(context.Background(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stickyip-placement-probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			out = fmt.Sprint(err)
		}
		return strings.Contains(out, probeRefused), out
	})
	return time.Since(start)
}

// resourceOf maps the kinds deploy/placement ships to their resources (all
// cluster-scoped).
func resourceOf(t testing.TB, u *unstructured.Unstructured) schema.GroupVersionResource {
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		t.Fatal(err)
	}
	plural := map[string]string{
		"CustomResourceDefinition": "customresourcedefinitions", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
		"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
		"MutatingAdmissionPolicy": "mutatingadmissionpolicies", "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
	}[u.GetKind()]
	if plural == "" || !slices.Contains([]string{"apiextensions.k8s.io", "rbac.authorization.k8s.io", "admissionregistration.k8s.io"}, gv.Group) {
		t.Fatalf("deploy/placement: unexpected %s %s", u.GetAPIVersion(), u.GetKind())
	}
	return gv.WithResource(plural)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
