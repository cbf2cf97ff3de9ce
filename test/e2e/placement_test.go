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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/test/harness"
)

// placementWeight is the weight deploy/placement/placement-policy.yaml
// documents for its preferred node affinity term.
const placementWeight = 100

// TestPlacement applies deploy/placement to a real kube-apiserver
// (Node,RBAC authorization, NodeRestriction) and checks, with the nodes'
// own credentials, who may write IPHold records; that the placement policy
// prefers the holding node for a re-created pod with a reservation and
// leaves every other pod alone; and that checkpointd on the node (real
// kubelet, containerd and CNI chain) publishes a sticky pod's record at ADD,
// updates it at DEL and deletes it at expiry, three writes in all.
func TestPlacement(t *testing.T) {
	n := newCheckpointdNode(t)
	ctx := context.Background()
	n.startControlPlane()
	n.ensureNamespace("db")
	n.applyPlacement()
	n.startContainerd()
	n.startKubelet(true)
	// node2 exists only as a Node object and a credential.
	if _, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node2Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node1, node2 := n.dynamicAs(n.nodeToken()), n.dynamicAs(n.tokens[nodeUser(node2Name)])
	holds := func(c dynamic.Interface) dynamic.ResourceInterface {
		return c.Resource(placement.Resource).Namespace("db")
	}

	// ---- Who may write.
	rec := n.holdRecord("db-0", nodeName, "10.244.1.50")
	eventually(t, "writer policy in force (node2's forged record for node1 denied)", time.Minute, time.Second, func() (bool, string) {
		_, err := holds(node2).Create(ctx, n.holdRecord("db-0", nodeName, "10.244.1.50"), metav1.CreateOptions{})
		if err == nil {
			_ = holds(n.dynamicAs(n.adminToken)).Delete(ctx, rec.GetName(), metav1.DeleteOptions{})
			return false, "created"
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may write only its own"), err.Error()
	})
	forged := n.holdRecord("cache", node2Name, "10.244.1.51")
	forged.SetOwnerReferences(rec.GetOwnerReferences()) // node2's record owned by node1's Node
	if _, err := holds(node2).Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2 creating its record owned by Node node1: %v, want Forbidden", err)
	}
	created, err := holds(node1).Create(ctx, rec, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node1 creating its own record: %v", err)
	}
	if err := unstructured.SetNestedField(created.Object, "reserved", "spec", "state"); err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(created.Object, time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "spec", "expiresAt")
	if created, err = holds(node1).Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node1 updating its own record: %v", err)
	}
	moved := created.DeepCopy()
	_ = unstructured.SetNestedField(moved.Object, node2Name, "spec", "nodeName")
	if _, err := holds(node1).Update(ctx, moved, metav1.UpdateOptions{}); err == nil {
		t.Error("node1 moved its record to node2: nodeName must be immutable")
	}
	if _, err := holds(node2).Update(ctx, created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2 updating node1's record: %v, want Forbidden", err)
	}
	if err := holds(node2).Delete(ctx, created.GetName(), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node2 deleting node1's record: %v, want Forbidden", err)
	}
	t.Log("writes: node1 created and updated its record; node2 was denied forging, changing and deleting it")

	// ---- The hint. db-0 (a StatefulSet pod's name) and, with an identity,
	// a Deployment-style pod (generateName) in db, where node1 holds both.
	if _, err := holds(node1).Create(ctx, n.holdRecord("cache", nodeName, "10.244.1.52"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second record of db-0 on node1 (another network): still one term.
	second := n.holdRecord("db-0", nodeName, "10.244.2.50")
	second.SetName(placement.ObjectName(nodeName, "cbr1", "db-0", "eth0"))
	_ = unstructured.SetNestedField(second.Object, "cbr1", "spec", "network")
	if _, err := holds(node1).Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "placement policy in force", time.Minute, time.Second, func() (bool, string) {
		p, err := n.client.CoreV1().Pods("db").Create(ctx, unboundPod("db", "cache", map[string]string{annReservation: "10"}), metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		zero := int64(0)
		_ = n.client.CoreV1().Pods("db").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		return p.Spec.Affinity != nil, fmt.Sprintf("affinity %v", p.Spec.Affinity)
	})
	own := corev1.PreferredSchedulingTerm{Weight: 7, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}
	required := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}}}}
	ours := corev1.PreferredSchedulingTerm{Weight: placementWeight, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}
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
		{"identity, generateName", unboundPod("db", "", map[string]string{annReservation: "5m", "stickyip.io/identity": "cache"}),
			[]corev1.PreferredSchedulingTerm{ours}},
		{"no reservation annotation", withOwn(unboundPod("db", "db-0", nil)), []corev1.PreferredSchedulingTerm{own}},
		{"reservation 0", unboundPod("db", "db-0", map[string]string{annReservation: "0"}), nil},
		{"reservation 0s", unboundPod("db", "db-0", map[string]string{annReservation: "0s"}), nil},
		{"another identity", unboundPod("db", "db-1", map[string]string{annReservation: "10"}), nil},
		{"identity annotation wins over the name", unboundPod("db", "db-0", map[string]string{annReservation: "10", "stickyip.io/identity": "other"}), nil},
		{"same name, another namespace", unboundPod("default", "db-0", map[string]string{annReservation: "10"}), nil},
	}
	for _, c := range cases {
		got, err := n.client.CoreV1().Pods(c.pod.Namespace).Create(ctx, c.pod, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s: create: %v", c.name, err)
			continue
		}
		var terms []corev1.PreferredSchedulingTerm
		if a := got.Spec.Affinity; a != nil && a.NodeAffinity != nil {
			terms = a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		}
		if own := c.pod.Spec.Affinity; own != nil {
			a := got.Spec.Affinity
			if a == nil || fmt.Sprint(a.PodAntiAffinity) != fmt.Sprint(own.PodAntiAffinity) || fmt.Sprint(requiredOf(a)) != fmt.Sprint(requiredOf(own)) {
				t.Errorf("%s: the pod's own affinity changed: %v, was %v", c.name, a, own)
			}
		}
		if fmt.Sprint(terms) != fmt.Sprint(c.want) || (c.want == nil && got.Spec.Affinity != nil) {
			t.Errorf("%s: preferred terms %v (affinity %v), want %v", c.name, terms, got.Spec.Affinity, c.want)
		} else {
			t.Logf("hint: %s: preferred terms %v", c.name, terms)
		}
		zero := int64(0)
		_ = n.client.CoreV1().Pods(got.Namespace).Delete(ctx, got.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		eventually(t, "pod "+got.Name+" gone", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
			_, err := n.client.CoreV1().Pods(got.Namespace).Get(ctx, got.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	for _, name := range []string{created.GetName(), second.GetName(), placement.ObjectName(nodeName, "cbr0", "cache", "eth0")} {
		if err := holds(node1).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("node1 deleting its own record %s: %v", name, err)
		}
	}

	// ---- The publisher: checkpointd on node1 with the real CNI chain.
	n.startCheckpointd()
	const reserve = 20 * time.Second
	start := time.Now()
	n.createPod(testPod("web", map[string]string{annReservation: reserve.String()}))
	n.createPod(testPod("plain", nil))
	ip := n.waitAPIPodRunning("web", 2*time.Minute)
	n.waitAPIPodRunning("plain", 2*time.Minute)
	var created2 time.Duration
	eventually(t, "record of default/web", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		u, err := n.recordOf("default", "web", nodeName)
		if err != nil || u == nil {
			return false, fmt.Sprint("no record yet ", err)
		}
		created2 = time.Since(start)
		s, _, _ := unstructured.NestedMap(u.Object, "spec")
		refs := u.GetOwnerReferences()
		if fmt.Sprint(s["ips"]) != "["+ip+"]" || s["state"] != "allocated" || len(refs) != 1 || refs[0].Name != nodeName {
			return false, fmt.Sprintf("record %v, owners %v", s, refs)
		}
		return true, ""
	})
	t.Logf("publisher: record of default/web (%s) allocated, %s after the pod's creation", ip, created2.Round(100*time.Millisecond))
	if u, err := n.recordOf("default", "plain", nodeName); err != nil || u != nil {
		t.Errorf("a pod without reservation got a record: %v %v", u, err)
	}
	n.deletePodGracefully("web", time.Minute)
	deleted := time.Now()
	var expires time.Time
	eventually(t, "record of default/web reserved", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		u, err := n.recordOf("default", "web", nodeName)
		if err != nil || u == nil {
			return false, fmt.Sprint("no record ", err)
		}
		s, _, _ := unstructured.NestedMap(u.Object, "spec")
		if s["state"] != "reserved" {
			return false, fmt.Sprint(s)
		}
		expires, err = time.Parse(time.RFC3339, fmt.Sprint(s["expiresAt"]))
		return err == nil, fmt.Sprint(s, err)
	})
	if d := expires.Sub(deleted); d < reserve-5*time.Second || d > reserve+5*time.Second {
		t.Errorf("record expires %s after the DEL, want about %s", d, reserve)
	}
	t.Logf("publisher: record reserved until %s, %s after the delete", expires.Format(time.RFC3339), time.Since(deleted).Round(100*time.Millisecond))
	eventually(t, "record of default/web deleted at expiry", reserve+30*time.Second, time.Second, func() (bool, string) {
		u, err := n.recordOf("default", "web", nodeName)
		return err == nil && u == nil, fmt.Sprint(u, err)
	})
	t.Logf("publisher: record deleted %s after expiry", time.Since(expires).Round(100*time.Millisecond))
	writes := map[string]string{}
	for _, verb := range []string{"create", "update", "delete"} {
		v, err := n.metric(`checkpointd_placement_writes_total{verb="` + verb + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		writes[verb] = v
	}
	if writes["create"] != "1" || writes["update"] != "1" || writes["delete"] != "1" {
		t.Errorf("API writes for one sticky pod's lifecycle and one plain pod: %v, want one create, one update, one delete", writes)
	}
	t.Logf("publisher: API writes for one sticky pod lifecycle (ADD, DEL, expiry) and one plain pod: %v", writes)
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

// holdRecord is an IPHold of identity held by node (owned by its Node).
func (n *node) holdRecord(identity, node, ip string) *unstructured.Unstructured {
	no, err := n.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	uid := types.UID("")
	if err == nil {
		uid = no.UID
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": placement.Resource.GroupVersion().String(), "kind": placement.Kind,
		"spec": map[string]any{"identity": identity, "network": "cbr0", "ifName": "eth0", "nodeName": node,
			"ips": []any{ip}, "state": "allocated"},
	}}
	u.SetName(placement.ObjectName(node, "cbr0", identity, "eth0"))
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}})
	return u
}

func (cp *controlPlane) dynamicAs(token string) dynamic.Interface {
	c, err := dynamic.NewForConfig(cp.apiClientConfig(token))
	if err != nil {
		cp.t.Fatal(err)
	}
	return c
}

// records lists node's IPHold records in namespace ns ("": every
// namespace), as admin.
func (cp *controlPlane) records(ns, node string) ([]unstructured.Unstructured, error) {
	l, err := cp.dynamicAs(cp.adminToken).Resource(placement.Resource).Namespace(ns).List(context.Background(),
		metav1.ListOptions{FieldSelector: placement.NodeField + "=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// recordOf is node's IPHold record of identity in namespace ns, nil when it
// has none.
func (cp *controlPlane) recordOf(ns, identity, node string) (*unstructured.Unstructured, error) {
	l, err := cp.records(ns, node)
	if err != nil {
		return nil, err
	}
	for i := range l {
		if id, _, _ := unstructured.NestedString(l[i].Object, "spec", "identity"); id == identity {
			return &l[i], nil
		}
	}
	return nil, nil
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
	eventually(t, "IPHold CRD established", time.Minute, time.Second, func() (bool, string) {
		_, err := cp.dynamicAs(cp.adminToken).Resource(placement.Resource).List(context.Background(), metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// resourceOf maps the kinds deploy/placement ships to their resources (all
// cluster-scoped).
func resourceOf(t *testing.T, u *unstructured.Unstructured) schema.GroupVersionResource {
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
