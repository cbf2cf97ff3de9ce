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

	authenticationv1 "k8s.io/api/authentication/v1"
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
	"github.com/stickyip/stickyip/test/harness"
)

// placementWeight is the weight deploy/placement/placement-policy.yaml
// documents for its preferred node affinity term.
const placementWeight = 100

// TestPlacement applies deploy/placement to a real kube-apiserver
// (Node,RBAC authorization, NodeRestriction) and checks, with the nodes'
// own credentials, who may write what in the placement index (IPHoldShard):
// a node claims an identity only for a pod bound to it, writes only its own
// entries and owner reference; that the placement policy prefers the
// holding node for a re-created pod with a reservation and leaves every
// other pod alone; and that checkpointd on the node (real kubelet,
// containerd and CNI chain) claims a sticky pod's identity at ADD, keeps it
// through the DEL and releases it at expiry: two writes in all.
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
	for _, p := range []*corev1.Pod{testPod("db-0", nil), testPod("queue-7d9f8-b", nil)} {
		p.Namespace = "db"
		if p.Name == "queue-7d9f8-b" {
			p.Spec.NodeName = node2Name
		}
		if _, err := n.client.CoreV1().Pods("db").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n.waitPodRunningIn("db", "db-0", 2*time.Minute)
	node1 := placement.NewAPI(n.clientAs(n.nodeToken()), nodeName)
	node2 := placement.NewAPI(n.clientAs(n.tokens[nodeUser(node2Name)]), node2Name)
	uid1, err := node1.NodeUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	uid2, err := node2.NodeUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	hold := func(node, pod, ip string) placement.Hold {
		return placement.Hold{Node: node, Pod: pod, IPs: []string{ip}, Since: now}
	}
	dbShard, queueShard := placement.ShardOf("db-0"), placement.ShardOf("queue")
	if dbShard == queueShard {
		t.Fatalf("db-0 and queue share %s: the test needs them apart", dbShard)
	}

	// ---- Who may write. First what the writer policy refuses, once it is
	// in force: node2 claiming db-0, a pod bound to node1.
	eventually(t, "writer policy in force (node2's claim of node1's pod denied)", time.Minute, time.Second, func() (bool, string) {
		_, err := node2.Apply(ctx, "db", dbShard, uid2, map[string]placement.Hold{"db-0": hold(node2Name, "db-0", "10.244.2.9")}, false)
		if err == nil {
			n.adminDeleteShard("db", dbShard)
			return false, "accepted"
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only for a pod bound to it"), err.Error()
	})
	refused := map[string]func() error{
		"claim db-0, a pod bound to node1": func() error {
			_, err := node2.Apply(ctx, "db", dbShard, uid2, map[string]placement.Hold{"db-0": hold(node2Name, "db-0", "10.244.2.9")}, true)
			return err
		},
		"claim web-0, a pod that never ran": func() error {
			_, err := node2.Apply(ctx, "db", placement.ShardOf("web-0"), uid2, map[string]placement.Hold{"web-0": hold(node2Name, "web-0", "10.244.2.9")}, true)
			return err
		},
		"write an entry naming node1": func() error {
			_, err := node2.Apply(ctx, "db", dbShard, uid2, map[string]placement.Hold{"db-0": hold(nodeName, "db-0", "10.244.1.9")}, true)
			return err
		},
		"write a shard outside shard-0 … shard-f": func() error {
			_, err := node2.Apply(ctx, "db", "shard-10", uid2, map[string]placement.Hold{"queue": hold(node2Name, "queue-7d9f8-b", "10.244.2.9")}, true)
			return err
		},
	}
	for what, f := range refused {
		if err := f(); !apierrors.IsForbidden(err) {
			t.Errorf("node2: %s: %v, want Forbidden", what, err)
		} else {
			t.Logf("node2: %s: Forbidden (%v)", what, err)
		}
	}
	if l := n.shardsIn("db"); len(l) != 0 {
		t.Fatalf("refused writes stored something: %+v", l)
	}
	// node1 claims db-0 (its pod), node2 queue (a Deployment pod bound to
	// it, whose identity is not its name).
	if _, err := node1.Apply(ctx, "db", dbShard, uid1, map[string]placement.Hold{"db-0": hold(nodeName, "db-0", "10.244.1.50")}, false); err != nil {
		t.Fatalf("node1 claiming db-0, its own pod: %v", err)
	}
	if _, err := node2.Apply(ctx, "db", queueShard, uid2, map[string]placement.Hold{"queue": hold(node2Name, "queue-7d9f8-b", "10.244.2.51")}, false); err != nil {
		t.Fatalf("node2 claiming queue for its pod queue-7d9f8-b: %v", err)
	}
	two := map[string]placement.Hold{"db-0": hold(nodeName, "db-0", "10.244.1.50")}
	for _, id := range []string{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"} { // some share db-0's shard
		if placement.ShardOf(id) == dbShard {
			two[id] = hold(nodeName, "db-0", "10.244.1.51")
		}
	}
	if len(two) >= 3 {
		if _, err := node1.Apply(ctx, "db", dbShard, uid1, two, false); !apierrors.IsForbidden(err) {
			t.Errorf("node1 claiming %d identities in one write: %v, want Forbidden (one claim per write)", len(two)-1, err)
		}
	}
	reserved := hold(nodeName, "db-0", "10.244.1.50")
	reserved.Since = now.Add(time.Second) // db-0 started again on node1
	if _, err := node1.Apply(ctx, "db", dbShard, uid1, map[string]placement.Hold{"db-0": reserved}, false); err != nil {
		t.Fatalf("node1 updating its entry: %v", err)
	}
	// Raw writes the publisher never makes: removing or re-pointing another
	// node's entry, its owner reference, labels, another ConfigMap.
	raw := n.clientAs(n.tokens[nodeUser(node2Name)]).CoreV1().ConfigMaps("db")
	for what, patch := range map[string]string{
		"remove node1's entry":                     `{"data":{"db-0":null}}`,
		"point node1's entry at itself":            `{"data":{"db-0":"` + node2Name + ` db-0 2026-11-25T00:00:00.000Z 10.244.2.9"}}`,
		"label the shard":                          `{"metadata":{"labels":{"x":"y"}}}`,
		"make the shard immutable":                 `{"immutable":true}`,
		"drop node1's owner reference":             `{"metadata":{"ownerReferences":[]}}`,
		"own node1's shard without an entry there": `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"` + nodeName + `","uid":"` + string(uid1) + `"},{"apiVersion":"v1","kind":"Node","name":"` + node2Name + `","uid":"` + string(uid2) + `"}]}}`,
	} {
		_, err := raw.Patch(ctx, dbShard, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("node2: %s (merge patch): %v, want Forbidden", what, err)
		}
	}
	// On its own shard: hang it on node1's Node.
	patch := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"` + node2Name + `","uid":"` + string(uid2) + `"},{"apiVersion":"v1","kind":"Node","name":"` + nodeName + `","uid":"` + string(uid1) + `"}]}}`
	if _, err := raw.Patch(ctx, queueShard, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2: add node1's Node as an owner of its shard (merge patch): %v, want Forbidden", err)
	}
	if err := raw.Delete(ctx, dbShard, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2 deleting a shard: %v, want Forbidden", err)
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "db"}, Data: map[string]string{"x": "y"}}
	if _, err := raw.Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2 creating another ConfigMap: %v, want Forbidden", err)
	}
	// The namespace's own users cannot write the index either: a service
	// account with edit rights in db.
	editor := n.namespaceEditor("db")
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: placement.ShardOf("web-0"), Namespace: "db",
		Labels: map[string]string{placement.IndexLabel: strings.TrimPrefix(placement.ShardOf("web-0"), placement.ShardPrefix)}},
		Data: map[string]string{"web-0": node2Name + " web-0 2026-11-25T00:00:00.000Z 10.244.2.9"}}
	byPolicy := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "is written by the nodes")
	}
	if _, err := editor.CoreV1().ConfigMaps("db").Create(ctx, forged, metav1.CreateOptions{}); !byPolicy(err) {
		t.Errorf("an editor of namespace db creating an index shard: %v, want Forbidden by the index policy", err)
	}
	if _, err := editor.CoreV1().ConfigMaps("db").Patch(ctx, dbShard, types.MergePatchType, []byte(`{"data":{"db-0":null}}`), metav1.PatchOptions{}); !byPolicy(err) {
		t.Errorf("an editor of namespace db removing an entry: %v, want Forbidden by the index policy", err)
	}
	if _, err := editor.CoreV1().ConfigMaps("db").Patch(ctx, dbShard, types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); !byPolicy(err) {
		t.Errorf("an editor of namespace db unlabelling a shard: %v, want Forbidden by the index policy", err)
	}
	plainCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "db"}, Data: map[string]string{"k": "v"}}
	if _, err := editor.CoreV1().ConfigMaps("db").Create(ctx, plainCM, metav1.CreateOptions{}); err != nil {
		t.Errorf("an editor of namespace db creating an ordinary ConfigMap: %v", err)
	}
	if h, ok := n.holdOf("db", "db-0"); !ok || !h.Equal(reserved) {
		t.Fatalf("db/db-0 after node2's refused writes: %+v (%v), want node1's %+v", h, ok, reserved)
	}
	t.Log("writes: node1 claimed db-0 and updated it, node2 claimed queue for its own pod; node2 was denied every other write")

	// ---- The hint. db-0 (a StatefulSet pod's name) is held by node1, queue
	// (an identity) by node2.
	eventually(t, "placement policy in force", time.Minute, time.Second, func() (bool, string) {
		terms := n.hintFor(unboundPod("db", "", map[string]string{annReservation: "10", annIdentity: "db-0"}))
		return len(terms) == 1, fmt.Sprint(terms)
	})
	own := corev1.PreferredSchedulingTerm{Weight: 7, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}
	required := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}}}}
	term := func(node string) corev1.PreferredSchedulingTerm {
		return corev1.PreferredSchedulingTerm{Weight: placementWeight, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}
	}
	ours, theirs := term(nodeName), term(node2Name)
	withOwn := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: required, PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{own}}}
		return p
	}
	antiOnly := func(p *corev1.Pod) *corev1.Pod { // an affinity with no nodeAffinity
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 3, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}}
		return p
	}
	requiredOnly := func(p *corev1.Pod) *corev1.Pod { // a nodeAffinity with no preferred terms
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}
		return p
	}
	// db-0 is deleted, as a StatefulSet pod is before its re-creation.
	zero := int64(0)
	if err := n.client.CoreV1().Pods("db").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod db/db-0 gone", time.Minute, 200*time.Millisecond, func() (bool, string) {
		_, err := n.client.CoreV1().Pods("db").Get(ctx, "db-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	cases := []struct {
		name string
		pod  *corev1.Pod
		want []corev1.PreferredSchedulingTerm // nil: no affinity at all
	}{
		{"statefulset pod, own affinity kept", withOwn(unboundPod("db", "db-0", map[string]string{annReservation: "10"})),
			[]corev1.PreferredSchedulingTerm{own, ours}},
		{"pod anti-affinity only, kept", antiOnly(unboundPod("db", "db-0", map[string]string{annReservation: "10"})), []corev1.PreferredSchedulingTerm{ours}},
		{"required node affinity only, kept", requiredOnly(unboundPod("db", "db-0", map[string]string{annReservation: "10"})), []corev1.PreferredSchedulingTerm{ours}},
		{"no affinity of its own", unboundPod("db", "db-0", map[string]string{annReservation: "90s"}), []corev1.PreferredSchedulingTerm{ours}},
		{"identity, generateName, held by node2", unboundPod("db", "", map[string]string{annReservation: "5m", annIdentity: "queue"}),
			[]corev1.PreferredSchedulingTerm{theirs}},
		{"a pod named as the identity, without the annotation: node2's entry names another pod", unboundPod("db", "queue", map[string]string{annReservation: "90s"}), nil},
		{"no reservation annotation", withOwn(unboundPod("db", "db-0", nil)), []corev1.PreferredSchedulingTerm{own}},
		{"reservation 0", unboundPod("db", "db-0", map[string]string{annReservation: "0"}), nil},
		{"reservation 0s", unboundPod("db", "db-0", map[string]string{annReservation: "0s"}), nil},
		{"another identity", unboundPod("db", "db-1", map[string]string{annReservation: "10"}), nil},
		{"identity annotation wins over the name", unboundPod("db", "db-0", map[string]string{annReservation: "10", annIdentity: "other"}), nil},
		{"same name, another namespace", unboundPod("default", "db-0", map[string]string{annReservation: "10"}), nil},
	}
	for _, c := range cases {
		n.checkHint(c.name, c.pod, c.want)
	}
	// A Node that is gone: the garbage collector drops its owner reference
	// (done by hand here: no controller-manager runs), and its entries stop
	// counting at once.
	if _, err := n.client.CoreV1().ConfigMaps("db").Patch(ctx, queueShard, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no hint from a node that no longer owns the shard", 30*time.Second, 500*time.Millisecond, func() (bool, string) {
		terms := n.hintFor(unboundPod("db", "", map[string]string{annReservation: "5m", annIdentity: "queue"}))
		return len(terms) == 0, fmt.Sprint(terms)
	})
	t.Log("hint: identity of a node that no longer owns the shard: none")
	n.adminDeleteShard("db", dbShard)
	n.adminDeleteShard("db", queueShard)

	// ---- The publisher: checkpointd on node1 with the real CNI chain.
	n.startCheckpointd()
	const reserve = 20 * time.Second
	start := time.Now()
	n.createPod(testPod("web", map[string]string{annReservation: reserve.String()}))
	n.createPod(testPod("plain", nil))
	ip := n.waitAPIPodRunning("web", 2*time.Minute)
	n.waitAPIPodRunning("plain", 2*time.Minute)
	var claimed time.Duration
	eventually(t, "entry of default/web", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		h, ok := n.holdOf("default", "web")
		if !ok {
			return false, "no entry yet"
		}
		claimed = time.Since(start)
		owners := n.ownersOf("default", placement.ShardOf("web"))
		if h.Node != nodeName || h.Pod != "web" || fmt.Sprint(h.IPs) != "["+ip+"]" || fmt.Sprint(owners) != "["+nodeName+"]" {
			return false, fmt.Sprintf("entry %+v, owners %v", h, owners)
		}
		return true, ""
	})
	t.Logf("publisher: default/web (%s) claimed, %s after the pod's creation", ip, claimed.Round(100*time.Millisecond))
	if h, ok := n.holdOf("default", "plain"); ok {
		t.Errorf("a pod without reservation got an entry: %+v", h)
	}
	n.deletePodGracefully("web", time.Minute)
	deleted := time.Now()
	expires := deleted.Add(reserve)
	time.Sleep(reserve / 2)
	if h, ok := n.holdOf("default", "web"); !ok || h.Pod != "web" {
		t.Fatalf("entry of default/web %s after the DEL, while its IP is reserved: %+v %v", time.Since(deleted).Round(time.Second), h, ok)
	}
	eventually(t, "entry of default/web released at expiry", reserve+30*time.Second, 500*time.Millisecond, func() (bool, string) {
		h, ok := n.holdOf("default", "web")
		owners := n.ownersOf("default", placement.ShardOf("web"))
		return !ok && len(owners) == 0, fmt.Sprintf("%+v owners %v", h, owners)
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
	if writes[placement.WriteClaim] != "1" || writes[placement.WriteUpdate] != "0" || writes[placement.WriteRelease] != "1" {
		t.Errorf("API writes for one sticky pod's lifecycle and one plain pod: %v, want one claim, no update, one release", writes)
	}
	t.Logf("publisher: API writes for one sticky pod lifecycle (ADD, DEL, expiry) and one plain pod: %v", writes)
}

// hintFor returns the preferred node affinity terms pod gets from the
// mutating admission policies (a server-side dry-run create).
func (n *node) hintFor(pod *corev1.Pod) []corev1.PreferredSchedulingTerm {
	got, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		n.t.Fatalf("dry-run create of %s/%s%s: %v", pod.Namespace, pod.Name, pod.GenerateName, err)
	}
	if a := got.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		return a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	}
	return nil
}

// checkHint creates pod through the API (a server-side dry run: the
// mutating admission policies run, nothing is stored) and checks the
// preferred node affinity terms it gets, and that its own affinity is kept.
func (n *node) checkHint(name string, pod *corev1.Pod, want []corev1.PreferredSchedulingTerm) {
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
		a := got.Spec.Affinity
		if a == nil || fmt.Sprint(a.PodAntiAffinity) != fmt.Sprint(own.PodAntiAffinity) || fmt.Sprint(requiredOf(a)) != fmt.Sprint(requiredOf(own)) {
			t.Errorf("%s: the pod's own affinity changed: %v, was %v", name, a, own)
		}
	}
	if fmt.Sprint(terms) != fmt.Sprint(want) || (want == nil && got.Spec.Affinity != nil) {
		t.Errorf("%s: preferred terms %v (affinity %v), want %v", name, terms, got.Spec.Affinity, want)
	} else {
		t.Logf("hint: %s: preferred terms %v", name, terms)
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
	ctx := context.Background()
	sa, err := cp.client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "editor"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "configmap-editor", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}
	if _, err := cp.client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "editor", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}}}
	if _, err := cp.client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cp.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cp.clientAs(tok.Status.Token)
}

// shardsIn returns the placement index shards of namespace ns ("": every
// namespace) by namespace/name, as admin.
func (cp *controlPlane) shardsIn(ns string) map[string]*placement.Shard {
	t := cp.t
	t.Helper()
	l, err := cp.client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: placement.IndexLabel})
	if err != nil {
		t.Fatalf("list the placement index: %v", err)
	}
	out := map[string]*placement.Shard{}
	for i := range l.Items {
		s, err := placement.DecodeShard(&l.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out[l.Items[i].Namespace+"/"+l.Items[i].Name] = s
	}
	return out
}

// holdOf is the entry of identity in namespace ns's placement index, as
// admin reads it.
func (cp *controlPlane) holdOf(ns, identity string) (placement.Hold, bool) {
	s := cp.shardsIn(ns)[ns+"/"+placement.ShardOf(identity)]
	if s == nil {
		return placement.Hold{}, false
	}
	h, ok := s.Holds[identity]
	return h, ok
}

// ownersOf names the Nodes that own shard ns/name.
func (cp *controlPlane) ownersOf(ns, name string) []string {
	if s := cp.shardsIn(ns)[ns+"/"+name]; s != nil {
		return s.Owners
	}
	return nil
}

// heldBy returns the identities (namespace/identity) whose entry names node
// in every namespace, and whether node still owns the shard each is in.
func (cp *controlPlane) heldBy(node string) map[string]bool {
	out := map[string]bool{}
	for key, s := range cp.shardsIn("") {
		ns, _, _ := strings.Cut(key, "/")
		for id := range s.Own(node) {
			out[ns+"/"+id] = s.OwnedBy(node)
		}
	}
	return out
}

// adminDeleteShard deletes shard ns/name as admin (gone already is fine).
func (cp *controlPlane) adminDeleteShard(ns, name string) {
	err := cp.client.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		cp.t.Fatal(err)
	}
}

// kubectlPath is the kubectl the e2e build made, "" when there is none
// (E2E_K8S=1.36 builds none).
func (cp *controlPlane) kubectlPath() string {
	if p := filepath.Join(cp.bins.k8s, "kubectl"); fileExists(p) {
		return p
	}
	return ""
}

// applyPlacement installs deploy/placement: with kubectl (apply -k, after
// a server-side dry run) when it is built, else the way `kubectl apply -f`
// does it (every *.yaml file), by server-side apply through the API.
func (cp *controlPlane) applyPlacement() {
	t := cp.t
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "placement")
	if cp.kubectlPath() != "" {
		t.Logf("kubectl apply --dry-run=server -f %s:\n%s", dir, cp.kubectl("apply", "--dry-run=server", "-f", dir))
		out := cp.kubectl("apply", "-k", dir)
		t.Logf("kubectl apply -k %s:\n%s", dir, out)
		// Applying the manifests again changes nothing: every field the API
		// server would default is spelled out (a list such as resourceRules is
		// atomic, so a defaulted field in it made kubectl rewrite it each time).
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasSuffix(line, " configured") {
				t.Errorf("kubectl apply -k of unchanged manifests changed %s", strings.TrimSuffix(line, " configured"))
			}
		}
	} else {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no manifests (%v)", dir, err)
		}
		admin := cp.dynamicAs(cp.adminToken)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range bytes.Split(data, []byte("\n---\n")) {
				u := &unstructured.Unstructured{}
				if err := yaml.Unmarshal(doc, &u.Object); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
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
	eventually(t, "placement policies in the API", time.Minute, time.Second, func() (bool, string) {
		_, err := cp.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(context.Background(), placementBindingName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
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
