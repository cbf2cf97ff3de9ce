package deploy

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/contract"
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

// The policies compute in CEL what checkpointd computes in Go (the shard of
// an identity, the names, the label, the bounds): one source, checked here.
func TestPlacementManifestsMatchThePublisher(t *testing.T) {
	docs := placementDocs(t)
	index := docs["ValidatingAdmissionPolicy/stickyip-placement-index"].(*admissionv1.ValidatingAdmissionPolicy)
	hint := docs["MutatingAdmissionPolicy/stickyip-placement"].(*admissionv1.MutatingAdmissionPolicy)
	var indexCEL, hintCEL strings.Builder
	for _, v := range index.Spec.Variables {
		indexCEL.WriteString(v.Expression + "\n")
	}
	for _, v := range index.Spec.Validations {
		indexCEL.WriteString(v.Expression + "\n" + v.MessageExpression + "\n")
	}
	for _, m := range hint.Spec.MatchConditions {
		hintCEL.WriteString(m.Expression + "\n")
	}
	for _, v := range hint.Spec.Variables {
		hintCEL.WriteString(v.Expression + "\n")
	}
	for name, cel := range map[string]string{"index policy": indexCEL.String(), "placement policy": hintCEL.String()} {
		for _, want := range []string{"'" + placement.ShardAlphabet + "'", "% " + strconv.Itoa(placement.ShardCount),
			placement.ShardPrefix, contract.AnnotationIdentity, "'" + contract.IdentityKeyPrefix + "'"} {
			if !strings.Contains(cel, want) && !(name == "index policy" && want == contract.AnnotationIdentity) {
				t.Errorf("%s does not use %q, as checkpointd/placement does", name, want)
			}
		}
	}
	for _, want := range []string{"<= " + strconv.Itoa(entry.MaxValueLen), "<= " + strconv.Itoa(entry.MaxIPs)} {
		if !strings.Contains(indexCEL.String(), want) {
			t.Errorf("index policy does not bound %q as entry does", want)
		}
	}
	if !strings.Contains(hintCEL.String(), "'"+contract.AnnotationPlacement+"'") || !strings.Contains(hintCEL.String(), "'"+contract.PlacementRequired+"'") {
		t.Errorf("placement policy does not read %s: %s", contract.AnnotationPlacement, contract.PlacementRequired)
	}
	role := docs["ClusterRole/stickyip:placement-publisher"].(*rbacv1.ClusterRole)
	var names []string
	for i := range placement.ShardCount {
		names = append(names, placement.ShardName(i))
	}
	if got := fmt.Sprint(role.Rules[1].ResourceNames); got != fmt.Sprint(names) {
		t.Errorf("RBAC names %s, want the shards %s", got, names)
	}
	for _, b := range []string{"MutatingAdmissionPolicyBinding/stickyip-placement", "MutatingAdmissionPolicyBinding/stickyip-placement-params",
		"ValidatingAdmissionPolicyBinding/stickyip-placement-params"} {
		var sel string
		switch o := docs[b].(type) {
		case *admissionv1.MutatingAdmissionPolicyBinding:
			sel = fmt.Sprint(o.Spec.ParamRef.Selector.MatchExpressions)
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			sel = fmt.Sprint(o.Spec.ParamRef.Selector.MatchExpressions)
		}
		if !strings.Contains(sel, placement.IndexLabel) {
			t.Errorf("%s selects %s, want the label %s", b, sel, placement.IndexLabel)
		}
	}
	// The forms of the fields: the very patterns checkpointd parses with,
	// in both policies (deploy/policycheck evaluates them).
	for name, cel := range map[string]string{"index policy": indexCEL.String(), "placement policy": hintCEL.String()} {
		for _, pat := range []string{entry.NamePattern, entry.SeqPattern, entry.TimePattern} {
			if !strings.Contains(cel, "'"+pat+"'") {
				t.Errorf("%s does not match %s, as entry.Parse does", name, pat)
			}
		}
	}
	// One authorizer check per claim, one validation each.
	slots := 0
	for _, v := range index.Spec.Validations {
		if strings.Contains(v.Expression, "name(variables.claims[") {
			slots++
		}
	}
	if slots != placement.MaxClaims || !strings.Contains(indexCEL.String(), "size(variables.claims) <= "+strconv.Itoa(placement.MaxClaims)) {
		t.Errorf("index policy checks %d claims per write, checkpointd makes up to %d", slots, placement.MaxClaims)
	}
	// The policies, then, once they are in effect, the RBAC that lets nodes
	// write the index: apart, so that no apply of deploy/placement (-k or
	// -f) lets nodes write it before its policy is in effect.
	kust, _ := fs.ReadFile(Placement, "placement/Kustomization")
	files, _ := fs.Glob(Placement, "placement/*.yaml")
	for _, f := range files {
		if !strings.Contains(string(kust), "- "+strings.TrimPrefix(f, "placement/")+"\n") {
			t.Errorf("Kustomization does not list %s", f)
		}
	}
	docs, err := PlacementObjects()
	if err != nil {
		t.Fatal(err)
	}
	nodeFiles, _ := fs.Glob(Placement, "placement/nodes/*.yaml")
	var nodeRBAC strings.Builder
	for _, f := range nodeFiles {
		nodeRBAC.Write(mustRead(t, f))
	}
	for key := range docs {
		if strings.HasPrefix(key, "ClusterRole") && !strings.Contains(nodeRBAC.String(), "name: "+strings.SplitN(key, "/", 2)[1]) {
			t.Errorf("%s is not in deploy/placement/nodes", key)
		}
	}
	nodes, _ := fs.ReadFile(Placement, "placement/nodes/Kustomization")
	if strings.Contains(string(kust), "\n- nodes") || strings.Contains(string(kust), "\n- rbac.yaml") || !strings.Contains(string(nodes), "\n- rbac.yaml") {
		t.Errorf("deploy/placement lists the nodes' RBAC, or deploy/placement/nodes does not:\n%s\n%s", kust, nodes)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(Placement, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
