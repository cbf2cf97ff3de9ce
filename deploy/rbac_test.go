package deploy

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// grant is one thing a rule allows: a verb on a resource of a group,
// limited to one name or not ("").
type grant struct{ group, resource, verb, name string }

func (g grant) String() string {
	if g.name != "" {
		return fmt.Sprintf("%s %s/%s %s", g.verb, g.group, g.resource, g.name)
	}
	return fmt.Sprintf("%s %s/%s", g.verb, g.group, g.resource)
}

// grants expands rules into what each allows, sorted. A wildcard or a
// non-resource URL is a grant of its own, which no contract holds.
func grants(rules []rbacv1.PolicyRule) []string {
	var out []string
	for _, r := range rules {
		for _, u := range r.NonResourceURLs {
			out = append(out, "non-resource URL "+u)
		}
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, grant{g, res, v, n}.String())
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// expand is grants for each of verbs on group/resource (names: each of
// them, or none).
func expand(group, resource string, verbs []string, names ...string) []string {
	return grants([]rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs, ResourceNames: names}})
}

func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// subjectGrants returns what every ClusterRole and Role bound to the
// subject (kind/namespace/name) grants it across the objects of docs, by
// the binding that grants it.
func subjectGrants(t *testing.T, docs map[string]any, kind, namespace, name string) map[string][]string {
	t.Helper()
	binds := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == kind && s.Name == name && (kind != rbacv1.ServiceAccountKind || s.Namespace == namespace)
		})
	}
	role := func(ref rbacv1.RoleRef, ns string) []string {
		if ref.Kind == "ClusterRole" {
			return grants(doc[*rbacv1.ClusterRole](t, docs, "ClusterRole/"+ref.Name).Rules)
		}
		r := doc[*rbacv1.Role](t, docs, "Role/"+ref.Name)
		if r.Namespace != ns {
			t.Errorf("RoleBinding in %s refers to Role %s of %s", ns, r.Name, r.Namespace)
		}
		var out []string
		for _, g := range grants(r.Rules) {
			out = append(out, g+" in "+ns)
		}
		return out
	}
	out := map[string][]string{}
	for key, obj := range docs {
		switch b := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			if binds(b.Subjects) {
				out[key] = role(b.RoleRef, "")
			}
		case *rbacv1.RoleBinding:
			if binds(b.Subjects) {
				out[key] = role(b.RoleRef, b.Namespace)
			}
		}
	}
	return out
}

// The nodes' RBAC is deploy/placement/nodes alone, and it grants every
// node (group system:nodes) what the contract says and nothing more:
// NodeRecords, no status, no index, nothing of the cluster's.
func TestNodesRBACIsTheContract(t *testing.T) {
	docs := placementDocs(t)
	got := subjectGrants(t, docs, rbacv1.GroupKind, "", "system:nodes")
	want := expand(placementv1.Group, placementv1.NodeRecordResource, []string{"get", "list", "watch", "create", "update", "patch", "delete"})
	if len(got) != 1 || !slices.Equal(got["ClusterRoleBinding/stickyip:node-records"], want) {
		t.Errorf("system:nodes is granted %v; the contract grants it, by ClusterRoleBinding/stickyip:node-records alone:\n%s", got, strings.Join(want, "\n"))
	}
	files, err := PlacementFiles(PlacementNodesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, _ := fs.ReadFile(Placement, f)
		err := eachObject(data, func(kind, name string, _ []byte) error {
			if kind != "ClusterRole" && kind != "ClusterRoleBinding" || name != "stickyip:node-records" && name != "stickyip:controller-index" {
				return fmt.Errorf("%s/%s", kind, name)
			}
			return nil
		})
		if err != nil {
			t.Errorf("deploy/%s holds %v: deploy/placement/nodes is the nodes' and the controller's index grants, each one ClusterRole and its binding", f, err)
		}
	}
}

// stickyip-controller's ServiceAccount is granted what the contract says
// and nothing more: cluster-wide by stickyip:controller (reads, the
// records' status, Events), its Lease by stickyip:controller-leader in its
// namespace, and the writes of ConfigMaps (which stickyip-index-writer
// confines to the shards) by stickyip:controller-index, in
// deploy/placement/nodes: applied once the policies are in effect.
func TestControllerRBACIsTheContract(t *testing.T) {
	docs := placementDocs(t)
	sa := doc[*corev1.ServiceAccount](t, docs, "ServiceAccount/"+ControllerName)
	if sa.Namespace != ControllerNamespace {
		t.Errorf("ServiceAccount %s in %s, want %s", sa.Name, sa.Namespace, ControllerNamespace)
	}
	got := subjectGrants(t, docs, rbacv1.ServiceAccountKind, ControllerNamespace, ControllerName)
	var leader []string
	for _, g := range union(expand("coordination.k8s.io", "leases", []string{"create"}), expand("coordination.k8s.io", "leases", []string{"get", "update"}, ControllerName)) {
		leader = append(leader, g+" in "+ControllerNamespace)
	}
	want := map[string][]string{
		"ClusterRoleBinding/stickyip:controller": union(
			expand("", "pods", []string{"list", "watch"}),
			expand("", "nodes", []string{"list", "watch"}),
			expand("apps", "statefulsets", []string{"list", "watch"}),
			expand(placementv1.Group, placementv1.NodeRecordResource, []string{"get", "list", "watch", "delete"}),
			expand(placementv1.Group, placementv1.NodeRecordResource+"/status", []string{"update", "patch"}),
			expand("", "configmaps", []string{"get", "list", "watch"}),
			expand("", "events", []string{"create", "patch"})),
		"RoleBinding/stickyip:controller-leader":       leader,
		"ClusterRoleBinding/stickyip:controller-index": expand("", "configmaps", []string{"create", "update", "patch", "delete"}),
	}
	for b, w := range want {
		if !slices.Equal(got[b], w) {
			t.Errorf("%s grants the controller\n%s\nthe contract:\n%s", b, strings.Join(got[b], "\n"), strings.Join(w, "\n"))
		}
	}
	for b := range got {
		if want[b] == nil {
			t.Errorf("%s grants the controller %v, which the contract does not", b, got[b])
		}
	}
	nodes, err := PlacementFiles(PlacementNodesDir)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range nodes {
		data, _ := fs.ReadFile(Placement, f)
		found = found || strings.Contains(string(data), "\n  name: stickyip:controller-index\n")
	}
	if !found {
		t.Error("stickyip:controller-index is not in deploy/placement/nodes: the controller could write ConfigMaps before stickyip-index-writer is in effect")
	}
}
