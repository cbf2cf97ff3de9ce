//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/test/harness"
)

// The namespace opt-in (deploy/placement/optin-policy.yaml),
// on the one-node cluster of TestPlacement.
const (
	optInNamespace  = "sts"                   // labelled contract.LabelStatefulSets=optInLabel
	optInLabel      = "10-required"           // 10 minutes, placement required
	optOutNamespace = "optout"                // labelled "0": out of the cluster's default
	optInPolicy     = "stickyip-statefulsets" // the mutating policy
	orderPolicy     = "e2e-order"             // a test policy that reshuffles the API server's policy order
	orderAnnotation = "e2e.stickyip.io/order"
)

// namespaceOptIn: who may switch the opt-in on, the label's values, what
// the policy does to each kind of pod with the namespace's setting and with
// the cluster's default, the hint seeing the annotations it adds whatever
// order the API server runs the policies in, and a StatefulSet pod on
// node1 (real CNI chain, checkpointd running) reserving its IP, marked in
// `stickyip list`, and published.
func (n *node) namespaceOptIn() {
	n.ensureNamespace(optInNamespace)
	n.ensureNamespace(optOutNamespace)
	sts := n.statefulSetObject(optInNamespace, "web")
	n.optInRights()
	n.labelNamespace(optOutNamespace, "0")
	n.labelNamespace(optInNamespace, optInLabel)
	eventually(n.t, "the opt-in in force in "+optInNamespace, time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := n.optInAnnotations(stsPod(optInNamespace, "web-9", sts, nil))
		return got == "10 required namespace", got
	})
	n.optInAdmission(sts)
	n.optInClusterDefault(sts)
	n.optInHintOrder(sts)
	n.optInRealPod(sts)
}

// statefulSetObject creates StatefulSet ns/name through the API: nothing
// runs it here (no controller-manager), the test creates its pods.
func (cp *controlPlane) statefulSetObject(ns, name string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	pod := testPod(name, nil)
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.StatefulSetSpec{
		ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec}}}
	s.Spec.Template.Spec.NodeName = ""
	got, err := cp.client.AppsV1().StatefulSets(ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		cp.t.Fatal(err)
	}
	return got
}

// stsPod is an unbound pod ns/name whose controller is owner, as the
// StatefulSet controller creates it.
func stsPod(ns, name string, owner *appsv1.StatefulSet, annotations map[string]string) *corev1.Pod {
	p := unboundPod(ns, name, annotations)
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: owner.Name, UID: owner.UID,
		Controller: &yes, BlockOwnerDeletion: &yes}}
	return p
}

// optInAnnotations creates pod (a server-side dry run, as admin, or as
// client when given) and returns what it got of the three annotations
// the opt-in sets: "<duration> <placement> <from>", "-" for an absent one.
func (n *node) optInAnnotations(pod *corev1.Pod) string {
	n.t.Helper()
	got, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		n.t.Fatalf("create %s/%s%s (dry run): %v", pod.Namespace, pod.Name, pod.GenerateName, err)
	}
	return optInOf(got)
}

func optInOf(p *corev1.Pod) string {
	var out []string
	for _, k := range []string{contract.AnnotationReservedDuration, contract.AnnotationPlacement, contract.AnnotationDurationFrom} {
		v, ok := p.Annotations[k]
		if !ok {
			v = "-"
		}
		out = append(out, v)
	}
	return strings.Join(out, " ")
}

// labelNamespace sets the opt-in label of ns as an administrator would
// (kubectl label namespace --overwrite: a patch of the Namespace).
func (cp *controlPlane) labelNamespace(ns, value string) {
	cp.t.Helper()
	if err := cp.patchLabel(cp.client.CoreV1().Namespaces(), ns, value); err != nil {
		cp.t.Fatalf("label namespace %s %s=%s: %v", ns, contract.LabelStatefulSets, value, err)
	}
}

func (cp *controlPlane) patchLabel(nss interface {
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Namespace, error)
}, ns, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, contract.LabelStatefulSets, value)
	_, err := nss.Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// optInRights: the administrator of a namespace (the default admin role,
// bound in it) and its editor can neither set nor remove the opt-in; a
// value the label does not take is refused at the Namespace, naming it.
func (n *node) optInRights() {
	t := n.t
	ctx := context.Background()
	for _, role := range []string{"admin", "edit"} {
		c := n.namespaceRole(optInNamespace, role)
		requireRefused(t, "the namespace's "+role+" labelling it", n.patchLabel(c.CoreV1().Namespaces(), optInNamespace, "30"), "forbidden")
		_, err := c.CoreV1().Namespaces().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: optInNamespace,
			Labels: map[string]string{contract.LabelStatefulSets: "30"}}}, metav1.UpdateOptions{})
		requireRefused(t, "the namespace's "+role+" updating it with the label", err, "forbidden")
	}
	// What RBAC does allow: a Role of the namespace granting patch on
	// namespaces reaches that one Namespace object (its request's
	// namespace is its own name), no other.
	labeller := n.namespaceRoleOf(optInNamespace, "labeller", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"patch"}})
	eventually(t, "a Role of "+optInNamespace+" granting patch on namespaces labelling it", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		err := n.patchLabel(labeller.CoreV1().Namespaces(), optInNamespace, "30")
		return err == nil, fmt.Sprint(err)
	})
	requireRefused(t, "a Role of "+optInNamespace+" granting patch on namespaces, labelling default", n.patchLabel(labeller.CoreV1().Namespaces(), "default", "30"), "forbidden")
	for _, bad := range []string{"30x", "30m-requird", "required", "1e3", "30m-Required"} {
		err := n.patchLabel(n.client.CoreV1().Namespaces(), optInNamespace, bad)
		requireRefused(t, "an administrator labelling "+optInNamespace+" "+contract.LabelStatefulSets+"="+bad, err,
			contract.LabelStatefulSets+`: "`+bad+`": want a duration`)
	}
	t.Log("opt-in: the namespace's admin and edit roles may not label it, a Role of its own granting patch on namespaces may (that namespace only); a malformed value is refused, naming it")
}

// namespaceRole returns a client for a new service account of ns bound (a
// RoleBinding in ns) to the cluster's default ClusterRole role.
func (cp *controlPlane) namespaceRole(ns, role string) kubernetes.Interface {
	return cp.boundServiceAccount(ns, role, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role})
}

// namespaceRoleOf returns a client for a new service account of ns bound
// to a new Role of ns holding rule.
func (cp *controlPlane) namespaceRoleOf(ns, name string, rule rbacv1.PolicyRule) kubernetes.Interface {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := cp.client.RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		cp.t.Fatal(err)
	}
	return cp.boundServiceAccount(ns, name, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name})
}

// boundServiceAccount creates service account ns/ns-<name> bound to ref in
// ns and returns a client with its token.
func (cp *controlPlane) boundServiceAccount(ns, name string, ref rbacv1.RoleRef) kubernetes.Interface {
	return cp.clientAs(cp.boundServiceAccountToken(ns, name, ref))
}

// boundServiceAccountToken creates service account ns/ns-<name> bound to
// ref in ns and returns a token of it.
func (cp *controlPlane) boundServiceAccountToken(ns, name string, ref rbacv1.RoleRef) string {
	t := cp.t
	ctx := context.Background()
	sa, err := cp.client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ns-" + name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ns-" + name, Namespace: ns}, RoleRef: ref,
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}}}
	if _, err := cp.client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cp.client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// optInAdmission: with namespace sts labelled 10-required, what each pod
// gets; the namespace default (no cluster default yet) reaches no other
// namespace.
func (n *node) optInAdmission(sts *appsv1.StatefulSet) {
	t := n.t
	yes, no := true, false
	owned := func(p *corev1.Pod, kind, apiVersion string, controller *bool) *corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "x", UID: "00000000-0000-0000-0000-000000000001", Controller: controller}}
		return p
	}
	mark := map[string]string{contract.AnnotationDurationFrom: contract.DurationFromNamespace}
	ns := optInNamespace
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"StatefulSet pod", stsPod(ns, "web-0", sts, nil), "10 required namespace"},
		{"StatefulSet pod, its own 0 (opted out)", stsPod(ns, "web-0", sts, map[string]string{annReservation: "0"}), "0 - -"},
		{"StatefulSet pod, its own 5m", stsPod(ns, "web-0", sts, map[string]string{annReservation: "5m"}), "5m - -"},
		{"StatefulSet pod, its own placement: preferred", stsPod(ns, "web-0", sts, map[string]string{annPlacement: "preferred"}), "10 preferred namespace"},
		{"StatefulSet pod, its own 5m and a mark it set itself", stsPod(ns, "web-0", sts, map[string]string{annReservation: "5m",
			contract.AnnotationDurationFrom: contract.DurationFromNamespace}), "5m - -"},
		{"a StatefulSet owner that is not its controller", owned(unboundPod(ns, "web-0", nil), "StatefulSet", "apps/v1", &no), "- - -"},
		{"a ReplicaSet's pod (Deployment)", owned(unboundPod(ns, "", nil), "ReplicaSet", "apps/v1", &yes), "- - -"},
		{"a Job's pod", owned(unboundPod(ns, "", nil), "Job", "batch/v1", &yes), "- - -"},
		{"a bare pod", unboundPod(ns, "solo", nil), "- - -"},
		{"a bare pod with the mark it set itself", unboundPod(ns, "solo", mark), "- - -"},
		{"a StatefulSet of another API group", owned(unboundPod(ns, "web-0", nil), "StatefulSet", "apps.kruise.io/v1beta1", &yes), "- - -"},
		{"a bare pod naming a StatefulSet its controller: what its author could write", owned(unboundPod(ns, "solo", nil), "StatefulSet", "apps/v1", &yes),
			"10 required namespace"},
		{"a StatefulSet pod of an unmarked namespace", stsPod("default", "web-0", sts, nil), "- - -"},
		{"a StatefulSet pod of a namespace labelled 0", stsPod(optOutNamespace, "web-0", sts, nil), "- - -"},
	}
	for _, c := range cases {
		if got := n.optInAnnotations(c.pod); got != c.want {
			t.Errorf("opt-in: %s: %s, want %s", c.name, got, c.want)
		} else {
			t.Logf("opt-in: %s: %s", c.name, got)
		}
	}
	n.optInFixed(sts)
	// A mirror pod (its node's own kind of pod) is left alone, mark included.
	c2 := n.clientAs(n.tokens[nodeUser(node2Name)])
	mirror := testPod("web-"+node2Name, map[string]string{contract.AnnotationConfigMirror: "x", annReservation: "10",
		contract.AnnotationDurationFrom: contract.DurationFromNamespace})
	mirror.Namespace, mirror.Spec.NodeName = ns, node2Name
	mirror.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node2Name, UID: n.nodeUID(node2Name), Controller: &yes}}
	got, err := c2.CoreV1().Pods(ns).Create(context.Background(), mirror, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("node2 creating a mirror pod (dry run): %v", err)
	}
	if optInOf(got) != "10 - namespace" {
		t.Errorf("opt-in: a mirror pod: %s, want its own annotations kept", optInOf(got))
	}
}

// optInFixed: the namespace labelled 10-required-fixed gives
// its StatefulSet pods stickyip.io/retention: fixed with the rest, unless
// they carry their own; a pod with its own duration gets nothing of it.
// The label is put back as it was.
func (n *node) optInFixed(sts *appsv1.StatefulSet) {
	t := n.t
	ns := optInNamespace
	retention := func(p *corev1.Pod) string {
		got, err := n.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("create %s/%s (dry run): %v", p.Namespace, p.Name, err)
		}
		v, ok := got.Annotations[contract.AnnotationRetention]
		if !ok {
			v = "-"
		}
		return optInOf(got) + " " + v
	}
	n.labelNamespace(ns, optInLabel+"-fixed")
	eventually(t, "the namespace's -fixed in force", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := retention(stsPod(ns, "web-0", sts, nil))
		return got == "10 required namespace fixed", got
	})
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"StatefulSet pod", stsPod(ns, "web-0", sts, nil), "10 required namespace fixed"},
		{"StatefulSet pod, its own retention: workload", stsPod(ns, "web-0", sts, map[string]string{contract.AnnotationRetention: contract.RetentionWorkload}),
			"10 required namespace workload"},
		{"StatefulSet pod, its own 5m", stsPod(ns, "web-0", sts, map[string]string{annReservation: "5m"}), "5m - - -"},
		{"a bare pod", unboundPod(ns, "solo", nil), "- - - -"},
	} {
		if got := retention(c.pod); got != c.want {
			t.Errorf("opt-in 10-required-fixed: %s: %s, want %s", c.name, got, c.want)
		} else {
			t.Logf("opt-in 10-required-fixed: %s: %s", c.name, got)
		}
	}
	n.labelNamespace(ns, optInLabel)
	eventually(t, "the namespace's label back", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := retention(stsPod(ns, "web-0", sts, nil))
		return got == "10 required namespace -", got
	})
}

// optInClusterDefault sets the cluster's default as documented (a kustomize
// overlay of deploy/placement applied with kubectl; without kubectl, the
// same patches through the API) and checks the order of precedence: the
// pod's own annotation, the namespace's label, the cluster's default; and
// that an unlabelled namespace's pods then get the hint once, from the
// opt-in's hint, as before from the hint's own binding. It then puts the
// default back to none.
func (n *node) optInClusterDefault(sts *appsv1.StatefulSet) {
	t := n.t
	ctx := context.Background()
	held := stsPod("default", "web-7", sts, map[string]string{annReservation: "5m"})
	held.Spec.NodeName = node2Name // bound to node2, which nothing runs: node2 may claim it
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.claimAs(node2Name, n.podEntry("default", "web-7", "web-7", "10.244.2.27")); err != nil {
		t.Fatalf("node2 claiming default/web-7, bound to it: %v", err)
	}
	n.deletePodNowIn("default", "web-7")
	eventually(t, "pod default/web-7 gone", time.Minute, 200*time.Millisecond, func() (bool, string) {
		_, err := n.client.CoreV1().Pods("default").Get(ctx, "web-7", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// A binding kubectl apply changed is read again by the API server
	// (its parameters too) within seconds: the verdict waits that long.
	hinted := func(when string, p *corev1.Pod, want string, hint bool) {
		t.Helper()
		var got *corev1.Pod
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			var err error
			got, err = n.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			ok := optInOf(got) == want && hint == hasOnly(got, node2Name, false) && (hint || got.Spec.Affinity == nil)
			if ok || time.Now().After(deadline) {
				break
			}
		}
		if optInOf(got) != want || hint != hasOnly(got, node2Name, false) || (!hint && got.Spec.Affinity != nil) {
			t.Errorf("%s: default/web-7 %s, affinity %v; want %s and the preferred term for node2: %v", when, optInOf(got), got.Spec.Affinity, want, hint)
		} else {
			t.Logf("%s: default/web-7 %s, the hint for node2: %v", when, optInOf(got), hint)
		}
	}
	hinted("no cluster default, its own 5m", stsPod("default", "web-7", sts, map[string]string{annReservation: "5m"}), "5m - -", true)
	hinted("no cluster default, no annotation", stsPod("default", "web-7", sts, nil), "- - -", false)
	n.setClusterDefault("5m")
	eventually(t, "the cluster's default in force", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := n.optInAnnotations(stsPod("default", "web-0", sts, nil))
		return got == "5m - cluster", got
	})
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"an unmarked namespace's StatefulSet pod", stsPod("default", "web-0", sts, nil), "5m - cluster"},
		{"its own 0", stsPod("default", "web-0", sts, map[string]string{annReservation: "0"}), "0 - -"},
		{"a namespace labelled 10-required", stsPod(optInNamespace, "web-0", sts, nil), "10 required namespace"},
		{"a namespace labelled 0", stsPod(optOutNamespace, "web-0", sts, nil), "- - -"},
		{"an unmarked namespace's bare pod", unboundPod("default", "solo", nil), "- - -"},
	} {
		if got := n.optInAnnotations(c.pod); got != c.want {
			t.Errorf("cluster default 5m: %s: %s, want %s", c.name, got, c.want)
		} else {
			t.Logf("cluster default 5m: %s: %s", c.name, got)
		}
	}
	hinted("cluster default 5m, its own 5m", stsPod("default", "web-7", sts, map[string]string{annReservation: "5m"}), "5m - -", true)
	hinted("cluster default 5m, no annotation", stsPod("default", "web-7", sts, nil), "5m - cluster", true)
	n.restoreOptIn()
	eventually(t, "no cluster default", time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := n.optInAnnotations(stsPod("default", "web-0", sts, nil))
		return got == "- - -", got
	})
	hinted("the cluster default removed, its own 5m", stsPod("default", "web-7", sts, map[string]string{annReservation: "5m"}), "5m - -", true)
	n.releaseAs(node2Name, "default", "web-7")
}

// setClusterDefault sets the cluster's default for StatefulSet pods the
// way docs/guides/placement.md says for kubectl users: an overlay of
// deploy/placement with the component cluster-default and a patch of the
// policy's first variable, applied with kubectl apply -k (without kubectl,
// the same patches through the API).
func (cp *controlPlane) setClusterDefault(value string) {
	t := cp.t
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	literal := fmt.Sprintf(`[{"op": "replace", "path": "/spec/variables/0/expression", "value": "'%s'"}]`, value)
	if cp.kubectlPath() == "" {
		cp.patchAsComponent(literal)
		return
	}
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "deploy", "placement")) // kustomize takes no absolute path
	if err != nil {
		t.Fatal(err)
	}
	overlay := fmt.Sprintf(`resources:
- %[1]s
components:
- %[1]s/cluster-default
patches:
- target: {kind: MutatingAdmissionPolicy, name: %[2]s}
  patch: '%[3]s'
`, base, optInPolicy, strings.ReplaceAll(literal, "'", "''"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	// The overlay grants the nodes nothing: the RBAC that lets nodes write
	// their records is deploy/placement/nodes, applied apart once the
	// NodeRecord policy is in effect, whatever order kustomize builds.
	for _, doc := range strings.Split(cp.kubectl("kustomize", dir), "\n---\n") {
		var head struct {
			Kind     string
			Subjects []struct{ Kind, Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		for _, s := range head.Subjects {
			if s.Kind == "Group" && s.Name == "system:nodes" {
				t.Fatalf("the documented overlay builds a %s granting system:nodes: the nodes' RBAC is deploy/placement/nodes", head.Kind)
			}
		}
	}
	out := cp.kubectl("apply", "-k", dir)
	for _, obj := range []string{"mutatingadmissionpolicy.admissionregistration.k8s.io/" + optInPolicy,
		"mutatingadmissionpolicybinding.admissionregistration.k8s.io/" + optInPolicy,
		"mutatingadmissionpolicybinding.admissionregistration.k8s.io/" + optInPolicy + "-shards",
		"mutatingadmissionpolicybinding.admissionregistration.k8s.io/" + placementBindingName} {
		if !strings.Contains(out, obj+" configured") {
			t.Fatalf("kubectl apply -k of the overlay did not change %s:\n%s", obj, out)
		}
	}
	t.Logf("kubectl apply -k (deploy/placement, its component cluster-default, the default %s):\n%s", value, out)
}

// patchAsComponent applies, through the API, the JSON patches of
// deploy/placement/cluster-default to their bindings, and literal to the
// opt-in's policy.
func (cp *controlPlane) patchAsComponent(literal string) {
	t := cp.t
	ctx := context.Background()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "placement", "cluster-default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var component struct {
		Patches []struct {
			Target struct{ Kind, Name string }
			Patch  string
		}
	}
	if err := yaml.Unmarshal(b, &component); err != nil {
		t.Fatal(err)
	}
	api := cp.client.AdmissionregistrationV1()
	if _, err := api.MutatingAdmissionPolicies().Patch(ctx, optInPolicy, types.JSONPatchType, []byte(literal), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch %s: %v", optInPolicy, err)
	}
	for _, p := range component.Patches {
		if p.Target.Kind != "MutatingAdmissionPolicyBinding" {
			t.Fatalf("cluster-default patches a %s", p.Target.Kind)
		}
		if _, err := api.MutatingAdmissionPolicyBindings().Patch(ctx, p.Target.Name, types.JSONPatchType, []byte(p.Patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch binding %s: %v", p.Target.Name, err)
		}
	}
	t.Logf("the cluster's default (%s) and deploy/placement/cluster-default's patches, through the API", literal)
}

// restoreOptIn puts the opt-in's policy and the three bindings the cluster's
// default changes back as deploy/placement has them.
func (cp *controlPlane) restoreOptIn() {
	t := cp.t
	ctx := context.Background()
	api := cp.client.AdmissionregistrationV1()
	want := map[string]*admissionv1.MutatingAdmissionPolicyBinding{}
	var policy *admissionv1.MutatingAdmissionPolicy
	for _, f := range []string{"placement/optin-policy.yaml", "placement/placement-policy.yaml"} {
		data, err := deploy.Placement.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var head struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatal(err)
			}
			switch {
			case head.Kind == "MutatingAdmissionPolicyBinding":
				b := &admissionv1.MutatingAdmissionPolicyBinding{}
				if err := yaml.Unmarshal([]byte(doc), b); err != nil {
					t.Fatal(err)
				}
				want[head.Metadata.Name] = b
			case head.Kind == "MutatingAdmissionPolicy" && head.Metadata.Name == optInPolicy:
				policy = &admissionv1.MutatingAdmissionPolicy{}
				if err := yaml.Unmarshal([]byte(doc), policy); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	cur, err := api.MutatingAdmissionPolicies().Get(ctx, optInPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec = policy.Spec
	if _, err := api.MutatingAdmissionPolicies().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{optInPolicy, optInPolicy + "-shards", placementBindingName} {
		cur, err := api.MutatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec = want[name].Spec
		if _, err := api.MutatingAdmissionPolicyBindings().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// optInHintOrder: the hint names the node holding a StatefulSet pod's IP
// when the opt-in gave the pod its annotations, whichever of the two
// policies the API server runs first. The API server keeps its policies in
// a map and lists them anew, in another order, after any policy or binding
// changes; a test policy that annotates the namespace's pods is changed
// before each try, and each try waits until its new value shows (the new
// order in force). That policy also changes the pod after the hint, so
// every try checks the hint adds its term once when it is run again.
func (n *node) optInHintOrder(sts *appsv1.StatefulSet) {
	t := n.t
	ctx := context.Background()
	held := stsPod(optInNamespace, "web-0", sts, nil)
	held.Spec.NodeName = node2Name // bound to node2, which nothing runs: node2 may claim it
	if _, err := n.client.CoreV1().Pods(optInNamespace).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := n.claimAs(node2Name, n.podEntry(optInNamespace, "web-0", "web-0", "10.244.2.20")); err != nil {
		t.Fatalf("node2 claiming %s/web-0, bound to it: %v", optInNamespace, err)
	}
	n.deletePodNowIn(optInNamespace, "web-0")
	eventually(t, "pod "+optInNamespace+"/web-0 gone", time.Minute, 200*time.Millisecond, func() (bool, string) {
		_, err := n.client.CoreV1().Pods(optInNamespace).Get(ctx, "web-0", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	policies := n.client.AdmissionregistrationV1().MutatingAdmissionPolicies()
	defer func() {
		_ = n.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(ctx, orderPolicy, metav1.DeleteOptions{})
		_ = policies.Delete(ctx, orderPolicy, metav1.DeleteOptions{})
	}()
	const tries = 8
	for i := range tries {
		n.setOrderPolicy(i)
		var got *corev1.Pod
		eventually(t, fmt.Sprintf("the test policy's value %d in force", i), time.Minute, 200*time.Millisecond, func() (bool, string) {
			var err error
			got, err = n.client.CoreV1().Pods(optInNamespace).Create(ctx, stsPod(optInNamespace, "web-0", sts, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err.Error()
			}
			return got.Annotations[orderAnnotation] == fmt.Sprint(i), fmt.Sprint(got.Annotations)
		})
		if optInOf(got) != "10 required namespace" || !hasOnly(got, node2Name, true) {
			t.Fatalf("try %d of %d: web-0 got %s and affinity %v; want the opt-in's annotations and exactly one required term for node2",
				i+1, tries, optInOf(got), got.Spec.Affinity)
		}
	}
	t.Logf("opt-in: web-0 (no annotation of its own) required onto node2, which holds its IP, in %d of %d policy orders", tries, tries)
	n.releaseAs(node2Name, optInNamespace, "web-0")
}

// setOrderPolicy creates, or changes to value i, the test policy that
// annotates every pod created in namespace sts.
func (cp *controlPlane) setOrderPolicy(i int) {
	t := cp.t
	ctx := context.Background()
	policies := cp.client.AdmissionregistrationV1().MutatingAdmissionPolicies()
	ignore, never := admissionv1.Ignore, admissionv1.NeverReinvocationPolicy
	p := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: orderPolicy}, Spec: admissionv1.MutatingAdmissionPolicySpec{
		FailurePolicy: &ignore, ReinvocationPolicy: never,
		MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
		Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionv1.ApplyConfiguration{
			Expression: fmt.Sprintf(`Object{metadata: Object.metadata{annotations: {%q: "%d"}}}`, orderAnnotation, i)}}},
	}}
	if i == 0 {
		if _, err := policies.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: orderPolicy}, Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: orderPolicy, MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": optInNamespace}}}}}
		if _, err := cp.client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	cur, err := policies.Get(ctx, orderPolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Mutations = p.Spec.Mutations
	if _, err := policies.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// optInRealPod: a StatefulSet pod without annotations, created in the
// marked namespace and run on node1, reserves its IP for the namespace's
// 10 minutes, `stickyip list` says the duration came from the namespace,
// checkpointd publishes its entry, and its delete leaves the reservation.
func (n *node) optInRealPod(sts *appsv1.StatefulSet) {
	t := n.t
	pod := stsPod(optInNamespace, "web-1", sts, nil)
	pod.Spec.NodeName = nodeName
	n.createPod(pod)
	ip := n.waitPodRunningIn(optInNamespace, "web-1", 2*time.Minute)
	entryOf := func() string {
		for _, e := range n.stickyipList(t) {
			if e.Namespace == optInNamespace && e.Name == "web-1" {
				return fmt.Sprintf("%s %s %s %s", e.IP, e.State, e.Duration, e.DurationFrom)
			}
		}
		return "none"
	}
	if got, want := entryOf(), ip+" allocated 10m0s namespace"; got != want {
		t.Fatalf("stickyip list: %s/web-1 %s, want %s", optInNamespace, got, want)
	}
	eventually(t, "checkpointd publishing "+optInNamespace+"/web-1", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		e, ok := n.entriesOf(nodeName)[optInNamespace+"/web-1"]
		return ok && e.Pod == "web-1" && fmt.Sprint(e.Addresses) == "["+ip+"]" && e.Running(), fmt.Sprintf("%+v %v", e, ok)
	})
	n.deletePodGracefullyIn(optInNamespace, "web-1", time.Minute)
	if got, want := entryOf(), ip+" reserved 10m0s namespace"; got != want {
		t.Fatalf("stickyip list after the delete: %s/web-1 %s, want %s", optInNamespace, got, want)
	}
	t.Logf("opt-in: %s/web-1 on node1 (%s): reserved 10m from the namespace's label, published, reserved after its delete", optInNamespace, ip)
}
