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

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/test/harness"
)

// nodesGrant is the ClusterRoleBinding of deploy/placement/nodes that lets
// every node write its NodeRecord.
const nodesGrant = "stickyip:node-records"

// placementDirs are deploy/placement and its nodes' grant.
func placementDirs(t testing.TB) (dir, nodes string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "deploy", "placement")
	return dir, filepath.Join(dir, "nodes")
}

// applyPlacement installs deploy/placement as its README says: the API,
// the policies and stickyip-controller's rights, then, once the dry-run
// creation of probe.yaml is refused (the NodeRecord policy in effect),
// deploy/placement/nodes (the nodes' right to write their records); with
// kubectl apply -k when kubectl is built, else the Kustomization's
// resources in its order, by server-side apply as admin. It does not start
// the controller (startPlacementController).
func (cp *controlPlane) applyPlacement() {
	t := cp.t
	t.Helper()
	dir, nodes := placementDirs(t)
	if cp.kubectlPath() != "" {
		_, err := cp.client.RbacV1().ClusterRoleBindings().Get(context.Background(), nodesGrant, metav1.GetOptions{})
		installed := err == nil
		out := cp.kubectl("apply", "-k", dir)
		t.Logf("kubectl apply -k %s:\n%s", dir, out)
		t.Logf("the NodeRecord policy in effect after %v (the probe refused)", cp.waitRecordsPolicy().Round(time.Millisecond))
		grant := cp.kubectl("apply", "-k", nodes)
		t.Logf("kubectl apply -k %s:\n%s", nodes, grant)
		if !installed {
			cp.requirePoliciesBeforeGrant()
		}
		// Applying the manifests again changes nothing: every field the API
		// server would default is spelled out.
		for _, line := range strings.Split(strings.TrimSpace(cp.kubectl("apply", "-k", dir)+"\n"+cp.kubectl("apply", "-k", nodes)), "\n") {
			if strings.HasSuffix(line, " configured") {
				t.Errorf("kubectl apply -k of unchanged manifests changed %s", strings.TrimSuffix(line, " configured"))
			}
		}
	} else {
		cp.applyKustomization(dir)
		t.Logf("the NodeRecord policy in effect after %v (the probe refused)", cp.waitRecordsPolicy().Round(time.Millisecond))
		cp.applyKustomization(nodes)
	}
	eventually(t, "the placement API served", time.Minute, 200*time.Millisecond, func() (bool, string) {
		_, err := cp.dynamicAs(cp.adminToken).Resource(recordsGVR).List(context.Background(), metav1.ListOptions{Limit: 1})
		return err == nil, fmt.Sprint(err)
	})
}

// applyKustomization applies the resources of dir's Kustomization, in its
// order, as `kubectl apply -k` does, by server-side apply as admin.
func (cp *controlPlane) applyKustomization(dir string) {
	cp.t.Helper()
	cp.applyFiles(kustomizationFiles(cp.t, dir)...)
}

// applyFiles applies the objects of manifest files, in their order, as
// applyKustomization does.
func (cp *controlPlane) applyFiles(files ...string) {
	t := cp.t
	t.Helper()
	admin := cp.dynamicAs(cp.adminToken)
	for _, f := range files {
		for _, u := range manifestObjects(t, f) {
			gvr := resourceOf(t, u)
			js, _ := u.MarshalJSON()
			force := true
			var r dynamic.ResourceInterface = admin.Resource(gvr)
			if ns := u.GetNamespace(); ns != "" {
				r = admin.Resource(gvr).Namespace(ns)
			}
			eventually(t, "apply "+u.GetKind()+" "+u.GetName(), time.Minute, time.Second, func() (bool, string) {
				_, err := r.Patch(context.Background(), u.GetName(), types.ApplyPatchType, js, metav1.PatchOptions{FieldManager: "kubectl", Force: &force})
				return err == nil, fmt.Sprint(err)
			})
			t.Logf("applied %s %s (%s)", u.GetKind(), u.GetName(), filepath.Base(f))
		}
	}
}

// kustomizationFiles are the resources dir's Kustomization lists, in its
// order.
func kustomizationFiles(t testing.TB, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "Kustomization"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("%s/Kustomization: no resources (%v)", dir, err)
	}
	out := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		out[i] = filepath.Join(dir, r)
	}
	return out
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
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// probeRefused is in the API server's refusal of deploy/placement/probe.yaml
// once stickyip-node-records is in effect.
const probeRefused = "'stickyip-node-records' with binding 'stickyip-node-records' denied"

// waitRecordsPolicy waits until the NodeRecord policy is in effect, as the
// README has an administrator see it: the dry-run creation of
// deploy/placement/probe.yaml is refused (with kubectl when it is built:
// the documented command); it returns how long that took.
func (cp *controlPlane) waitRecordsPolicy() time.Duration {
	t := cp.t
	t.Helper()
	dir, _ := placementDirs(t)
	probe := filepath.Join(dir, "probe.yaml")
	start := time.Now()
	eventually(t, "the NodeRecord policy in effect (the probe refused)", time.Minute, 100*time.Millisecond, func() (bool, string) {
		var out string
		if cp.kubectlPath() != "" {
			out, _ = cp.kubectlErr("create", "-f", probe, "--dry-run=server", "-o", "name")
		} else {
			u := manifestObjects(t, probe)[0]
			_, err := cp.dynamicAs(cp.adminToken).Resource(recordsGVR).Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			out = fmt.Sprint(err)
		}
		return strings.Contains(out, probeRefused), out
	})
	return time.Since(start)
}

// requirePoliciesBeforeGrant fails the test unless the nodes' grant was
// created after the bindings of deploy/placement's policies: a record
// written before its policy is in effect was never checked. A binding's
// resourceVersion, never changed since, is etcd's order of its creation.
func (cp *controlPlane) requirePoliciesBeforeGrant() {
	t := cp.t
	ctx := context.Background()
	a := cp.client.AdmissionregistrationV1()
	crb, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, nodesGrant, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant, _ := parseRV(crb.ResourceVersion)
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
	for _, want := range []string{"ValidatingAdmissionPolicyBinding stickyip-node-records", "ValidatingAdmissionPolicyBinding stickyip-pod-identity",
		"MutatingAdmissionPolicyBinding " + placementBindingName, "MutatingAdmissionPolicyBinding " + optInPolicy + "-shards"} {
		if _, ok := rvs[want]; !ok {
			t.Fatalf("%s: not among the bindings labelled %s (%v)", want, sel.LabelSelector, rvs)
		}
	}
	for what, rv := range rvs {
		if n, _ := parseRV(rv); n >= grant {
			t.Errorf("%s created after the nodes' grant (resourceVersion %s ≥ %s): nodes could write records unchecked", what, rv, crb.ResourceVersion)
		}
	}
}

// parseRV reads a resourceVersion as the number etcd's revision is.
func parseRV(rv string) (uint64, error) {
	var n uint64
	_, err := fmt.Sscan(rv, &n)
	return n, err
}

// resourceOf maps the kinds deploy/placement ships to their resources.
func resourceOf(t testing.TB, u *unstructured.Unstructured) schema.GroupVersionResource {
	gv, err := schema.ParseGroupVersion(u.GetAPIVersion())
	if err != nil {
		t.Fatal(err)
	}
	plural := map[string]string{
		"CustomResourceDefinition": "customresourcedefinitions", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
		"Role": "roles", "RoleBinding": "rolebindings", "ServiceAccount": "serviceaccounts", "Deployment": "deployments",
		"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
		"MutatingAdmissionPolicy": "mutatingadmissionpolicies", "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
		placementv1.NodeRecordKind: placementv1.NodeRecordResource,
		"FlowSchema":               "flowschemas", "PriorityLevelConfiguration": "prioritylevelconfigurations",
	}[u.GetKind()]
	if plural == "" || !slices.Contains([]string{"", "apps", "apiextensions.k8s.io", "rbac.authorization.k8s.io", "admissionregistration.k8s.io",
		"flowcontrol.apiserver.k8s.io", placementv1.Group}, gv.Group) {
		t.Fatalf("deploy/placement: unexpected %s %s", u.GetAPIVersion(), u.GetKind())
	}
	return gv.WithResource(plural)
}

// kubectlPath is the kubectl the e2e build made, "" when there is none
// (E2E_K8S=1.36 builds none).
func (cp *controlPlane) kubectlPath() string {
	if p := filepath.Join(cp.bins.k8s, "kubectl"); fileExists(p) {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

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

// namespaceAdminToken returns a token of a service account of ns bound to
// the default admin ClusterRole there: a namespace's administrator, no
// cluster's.
func (cp *controlPlane) namespaceAdminToken(ns string) string {
	cp.aggregateDefaultRoles()
	return cp.boundServiceAccountToken(ns, "admin", rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"})
}

// aggregateDefaultRoles gives the default aggregated roles (view, edit,
// admin, in that order: each is aggregated into the next) their rules, as
// kube-controller-manager's clusterrole-aggregation controller does, on a
// control plane that runs none: without it a namespace's admin holds no
// right at all (its rules are empty until aggregated), and a test of what
// it cannot write would pass whatever the policies said. A role that has
// rules already is left to the controller that gave them.
func (cp *controlPlane) aggregateDefaultRoles() {
	t := cp.t
	t.Helper()
	ctx := context.Background()
	roles := cp.client.RbacV1().ClusterRoles()
	for _, name := range []string{"view", "edit", "admin"} {
		r, err := roles.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.AggregationRule == nil || len(r.Rules) > 0 {
			continue
		}
		for _, sel := range r.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				t.Fatal(err)
			}
			l, err := roles.List(ctx, metav1.ListOptions{LabelSelector: s.String()})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range l.Items {
				if c.Name != name {
					r.Rules = append(r.Rules, c.Rules...)
				}
			}
		}
		if _, err := roles.Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("aggregate ClusterRole %s: %v", name, err)
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
