package deploy

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// placementDocs is PlacementObjects, failing the test on an error.
func placementDocs(t *testing.T) map[string]any {
	t.Helper()
	docs, err := PlacementObjects()
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// doc returns the object key of docs as a T, failing the test when it is
// missing or of another type.
func doc[T any](t *testing.T, docs map[string]any, key string) T {
	t.Helper()
	v, ok := docs[key].(T)
	if !ok {
		t.Fatalf("deploy/placement has no %s (%T)", key, docs[key])
	}
	return v
}

// celOf is every expression of a policy's match conditions, variables,
// validations (with their messages) and mutations, one a line.
func celOf(p any) string {
	var b strings.Builder
	switch p := p.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		for _, m := range p.Spec.MatchConditions {
			b.WriteString(m.Expression + "\n")
		}
		for _, v := range p.Spec.Variables {
			b.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			b.WriteString(v.Expression + "\n" + v.Message + "\n" + v.MessageExpression + "\n")
		}
	case *admissionv1.MutatingAdmissionPolicy:
		for _, m := range p.Spec.MatchConditions {
			b.WriteString(m.Expression + "\n")
		}
		for _, v := range p.Spec.Variables {
			b.WriteString(v.Expression + "\n")
		}
		for _, m := range p.Spec.Mutations {
			b.WriteString(m.JSONPatch.Expression + "\n")
		}
	}
	return b.String()
}

// The API's names in the CRDs are contract/placementv1's, and so are the
// bounds the schema puts on a record.
func TestCRDsAreTheContract(t *testing.T) {
	docs := placementDocs(t)
	for _, c := range []struct {
		kind, plural, scope string
		status              bool
	}{
		{placementv1.NodeRecordKind, placementv1.NodeRecordResource, "Cluster", true},
	} {
		crd := doc[*unstructured.Unstructured](t, docs, "CustomResourceDefinition/"+c.plural+"."+placementv1.Group)
		str := func(f ...string) string { s, _, _ := unstructured.NestedString(crd.Object, f...); return s }
		if str("spec", "group") != placementv1.Group || str("spec", "names", "kind") != c.kind ||
			str("spec", "names", "plural") != c.plural || str("spec", "scope") != c.scope {
			t.Errorf("CRD %s: group %s, kind %s, plural %s, scope %s; want %s, %s, %s, %s", crd.GetName(), str("spec", "group"),
				str("spec", "names", "kind"), str("spec", "names", "plural"), str("spec", "scope"), placementv1.Group, c.kind, c.plural, c.scope)
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if len(versions) != 1 {
			t.Fatalf("CRD %s: %d versions, want %s alone", crd.GetName(), len(versions), placementv1.Version)
		}
		v := versions[0].(map[string]any)
		_, status, _ := unstructured.NestedMap(v, "subresources", "status")
		if v["name"] != placementv1.Version || v["served"] != true || v["storage"] != true || status != c.status {
			t.Errorf("CRD %s: version %v served %v storage %v, status subresource %v; want %s, true, true, %v",
				crd.GetName(), v["name"], v["served"], v["storage"], status, placementv1.Version, c.status)
		}
		if c.kind != placementv1.NodeRecordKind {
			continue
		}
		schema := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "entries"}
		entries, _, _ := unstructured.NestedInt64(v, append(schema, "maxItems")...)
		addrs, _, _ := unstructured.NestedInt64(v, append(schema, "items", "properties", "addresses", "maxItems")...)
		if entries != placementv1.MaxEntries || addrs != placementv1.MaxAddresses {
			t.Errorf("NodeRecord's schema bounds entries to %d, addresses to %d; placementv1 to %d, %d", entries, addrs, placementv1.MaxEntries, placementv1.MaxAddresses)
		}
	}
}

// The rule of one writer per record: stickyip-node-records matches every
// write of a NodeRecord (not its status, which nodes cannot write), denies,
// fails closed, and names the probe; the probe is a NodeRecord of that
// name that no Kustomization applies.
func TestNodeRecordsPolicyIsTheContract(t *testing.T) {
	docs := placementDocs(t)
	p := doc[*admissionv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy/stickyip-node-records")
	b := doc[*admissionv1.ValidatingAdmissionPolicyBinding](t, docs, "ValidatingAdmissionPolicyBinding/stickyip-node-records")
	rules := p.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || fmt.Sprint(rules[0].APIGroups, rules[0].APIVersions, rules[0].Resources, rules[0].Operations) !=
		fmt.Sprint([]string{placementv1.Group}, []string{placementv1.Version}, []string{placementv1.NodeRecordResource}, []admissionv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("stickyip-node-records matches %+v; want %s/%s %s on CREATE, UPDATE, DELETE", rules, placementv1.Group, placementv1.Version, placementv1.NodeRecordResource)
	}
	if *p.Spec.FailurePolicy != admissionv1.Fail || b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) ||
		b.Spec.ParamRef != nil || b.Spec.MatchResources != nil {
		t.Errorf("stickyip-node-records: failurePolicy %s, binding %+v; want Fail, and a binding that denies every match", *p.Spec.FailurePolicy, b.Spec)
	}
	cel := celOf(p)
	for _, want := range []string{"'" + placementv1.ProbeName + "'", "'system:nodes'", "'system:node:'", "ownerReferences", "finalizers"} {
		if !strings.Contains(cel, want) {
			t.Errorf("stickyip-node-records does not read %s", want)
		}
	}
	probe, err := Probe()
	if err != nil {
		t.Fatal(err)
	}
	if probe.Kind != placementv1.NodeRecordKind || probe.APIVersion != placementv1.SchemeGroupVersion.String() || probe.Name != placementv1.ProbeName || probe.Spec.NodeUID == "" {
		t.Errorf("the probe is %s %s %s (nodeUID %q); want a %s named %s that the CRD's schema takes", probe.APIVersion, probe.Kind, probe.Name, probe.Spec.NodeUID, placementv1.NodeRecordKind, placementv1.ProbeName)
	}
}

// The hint reads the index's ConfigMap shards of the pod's namespace, by
// their label, each series by its keys, and the contract's annotations; the opt-in's hint binding
// selects the same parameters; the pod-identity rule guards the
// identity annotation on the kubelet's status path; the pod policy checks
// the placement annotation's value.
func TestPlacementPoliciesUseTheContract(t *testing.T) {
	docs := placementDocs(t)
	hint := doc[*admissionv1.MutatingAdmissionPolicy](t, docs, "MutatingAdmissionPolicy/stickyip-placement")
	optIn := doc[*admissionv1.MutatingAdmissionPolicy](t, docs, "MutatingAdmissionPolicy/stickyip-statefulsets")
	for _, p := range []*admissionv1.MutatingAdmissionPolicy{hint, optIn} {
		if pk := p.Spec.ParamKind; pk == nil || pk.APIVersion != "v1" || pk.Kind != "ConfigMap" {
			t.Errorf("%s: paramKind %+v, want v1 ConfigMap", p.Name, pk)
		}
		cel := celOf(p)
		for _, want := range []string{"'" + contract.AnnotationIdentity + "'", "'" + contract.AnnotationReservedDuration + "'",
			"'" + contract.AnnotationPlacement + "'", "'" + contract.PlacementRequired + "'", "params.data",
			"['" + placementv1.IndexLabel + "'] == '" + placementv1.Names + "'", "['" + placementv1.IndexLabel + "'] == '" + placementv1.Keyed + "'",
			"<= " + strconv.Itoa(contract.MaxAnnotationValueLen)} {
			if !strings.Contains(cel, want) {
				t.Errorf("%s does not use %s", p.Name, want)
			}
		}
		if *p.Spec.FailurePolicy != admissionv1.Ignore || p.Spec.ReinvocationPolicy != admissionv1.NeverReinvocationPolicy {
			t.Errorf("%s: failurePolicy %s, reinvocation %s; a hint never blocks a pod, and a reinvoked one would add its term again",
				p.Name, *p.Spec.FailurePolicy, p.Spec.ReinvocationPolicy)
		}
	}
	for _, name := range []string{"stickyip-placement-shards", "stickyip-statefulsets-shards", "stickyip-index-params"} {
		b := doc[*admissionv1.MutatingAdmissionPolicyBinding](t, docs, "MutatingAdmissionPolicyBinding/"+name)
		r := b.Spec.ParamRef
		if r == nil || r.Name != "" || r.Namespace != "" || r.Selector == nil || len(r.Selector.MatchLabels) != 0 ||
			fmt.Sprint(r.Selector.MatchExpressions) != "[{"+placementv1.IndexLabel+" Exists []}]" ||
			r.ParameterNotFoundAction == nil || *r.ParameterNotFoundAction != admissionv1.AllowAction {
			t.Errorf("binding %s: paramRef %+v; want the shards of the pod's namespace by %s, none allowed", name, r, placementv1.IndexLabel)
		}
	}
	id := doc[*admissionv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy/stickyip-pod-identity")
	rules := id.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || fmt.Sprint(rules[0].Resources, rules[0].Operations) != "[pods/status] [UPDATE]" || len(id.Spec.MatchConditions) != 1 ||
		!strings.Contains(id.Spec.MatchConditions[0].Expression, "'system:nodes'") || !strings.Contains(celOf(id), "'"+contract.AnnotationIdentity+"'") {
		t.Errorf("stickyip-pod-identity: %+v, match conditions %+v; want pods/status UPDATE by members of system:nodes, reading %s", rules, id.Spec.MatchConditions, contract.AnnotationIdentity)
	}
	if *id.Spec.FailurePolicy != admissionv1.Ignore {
		t.Errorf("stickyip-pod-identity: failurePolicy %s; its comment says why Ignore", *id.Spec.FailurePolicy)
	}
	doc[*admissionv1.ValidatingAdmissionPolicyBinding](t, docs, "ValidatingAdmissionPolicyBinding/stickyip-pod-identity")
	pods := doc[*admissionv1.ValidatingAdmissionPolicy](t, docs, "ValidatingAdmissionPolicy/stickyip-placement-pods")
	if cel := celOf(pods); !strings.Contains(cel, "'"+contract.PlacementRequired+"', '"+contract.PlacementPreferred+"'") || strings.Contains(cel, "system:node") {
		t.Errorf("stickyip-placement-pods checks more or less than the value of %s:\n%s", contract.AnnotationPlacement, cel)
	}
	for key := range docs {
		if strings.Contains(key, "stickyip-placement-index") || strings.Contains(key, "stickyip-placement-params") ||
			strings.Contains(key, "stickyip-placement-fields") || strings.Contains(key, "stickyip-placement-collected") {
			t.Errorf("%s: the shared shards' policies are gone", key)
		}
	}
}

// What kubectl applies and in which order: every YAML file of each
// directory is in its Kustomization (apply -k), but the probes, which none
// lists; the nodes' RBAC is applied apart; stickyip-node-records is the
// last validating policy applied, so that the probe it refuses shows the
// others in effect (the API server loads them in the order written).
func TestPlacementKustomizations(t *testing.T) {
	var all []string
	for _, dir := range []string{PlacementDir, PlacementNodesDir} {
		files, err := PlacementFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		yamls, _ := fs.Glob(Placement, dir+"/*.yaml")
		for _, f := range yamls {
			probe := f == PlacementProbe
			if listed := slices.Contains(files, f); listed == probe {
				t.Errorf("deploy/%s: listed in its Kustomization %v, want %v", f, listed, !probe)
			}
		}
		all = append(all, files...)
	}
	files, _ := PlacementFiles(PlacementDir)
	last := ""
	for _, f := range files {
		data, _ := fs.ReadFile(Placement, f)
		if strings.Contains(string(data), "\nkind: ValidatingAdmissionPolicy\n") {
			last = path.Base(f)
		}
		binding := strings.Contains(string(data), "kind: ClusterRoleBinding") || strings.Contains(string(data), "kind: RoleBinding")
		if strings.HasPrefix(path.Base(f), "rbac") || binding && strings.Contains(string(data), "name: system:nodes") {
			t.Errorf("deploy/%s is applied with the policies and grants nodes something", f)
		}
	}
	if last != "node-records-policy.yaml" {
		t.Errorf("the last validating policy deploy/placement applies is in %s, want node-records-policy.yaml", last)
	}
	if len(all) != len(slices.Compact(slices.Sorted(slices.Values(all)))) {
		t.Errorf("a file is listed twice: %v", all)
	}
}
