package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/stickyip/stickyip/contract"
)

// celRegexp returns the one regular expression CEL's matches() is given in
// expr (a single-quoted literal). CEL and Go's regexp are both RE2.
func celRegexp(t *testing.T, what, expr string) *regexp.Regexp {
	t.Helper()
	m := regexp.MustCompile(`\.matches\('([^']*)'\)`).FindAllStringSubmatch(expr, -1)
	if len(m) == 0 {
		t.Fatalf("%s: no matches('…') in %s", what, expr)
	}
	return regexp.MustCompile(strings.ReplaceAll(m[0][1], `\\`, `\`))
}

// statefulSetPolicies returns the namespace opt-in's mutating policy and
// its label check.
func statefulSetPolicies(t *testing.T) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicy) {
	t.Helper()
	docs := placementDocs(t)
	m, _ := docs["MutatingAdmissionPolicy/stickyip-statefulsets"].(*admissionv1.MutatingAdmissionPolicy)
	v, _ := docs["ValidatingAdmissionPolicy/stickyip-statefulsets-label"].(*admissionv1.ValidatingAdmissionPolicy)
	if m == nil || v == nil || docs["MutatingAdmissionPolicyBinding/stickyip-statefulsets"] == nil ||
		docs["ValidatingAdmissionPolicyBinding/stickyip-statefulsets-label"] == nil {
		t.Fatal("deploy/placement lacks the stickyip-statefulsets policies or their bindings")
	}
	return m, v
}

func variable(p *admissionv1.MutatingAdmissionPolicy, name string) string {
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

// The label's values: what the namespace check lets through is what the
// mutating policy applies, and every duration either lets through is one
// the plugin parses, to the same zero/non-zero verdict: a label can never
// make a pod's ADD fail, and "0" forms mean no reservation in both.
func TestStatefulSetLabelValuesAreThePlugins(t *testing.T) {
	m, v := statefulSetPolicies(t)
	label := celRegexp(t, "stickyip-statefulsets-label", v.Spec.Validations[0].Expression)
	applies := variable(m, "applies")
	if got := celRegexp(t, "stickyip-statefulsets", applies); got.String() != label.String() {
		t.Fatalf("the mutating policy reads %s, the namespace check lets through %s", got, label)
	}
	zero := regexp.MustCompile(strings.ReplaceAll(regexp.MustCompile(`!variables\.duration\.matches\('([^']*)'\)`).FindStringSubmatch(applies)[1], `\\`, `\`))
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"30", true}, {"0", true}, {"00", true}, {"90s", true}, {"1h30m", true}, {"1.5h", true}, {"0s", true}, {"0m0s", true},
		{"0.0h", true}, {"00.00s-required", true}, {"30m-required", true}, {"30-preferred", true}, {"0-required", true}, {"300ms", true}, {"5us", true},
		{"99999999", true}, {"99999.99999h99999.99999h99999.99999h", true}, {"2h45m30s", true},
		{"", false}, {"30x", false}, {"-5", false}, {"+5", false}, {"30m-requird", false}, {"30m-", false}, {"30m_required", false},
		{"required", false}, {"1e3", false}, {".5h", false}, {"999999999", false}, {"999999h", false},
		{"1h1m1s1ms", false}, {"30m-required-required", false}, {"30 ", false}, {"30m,required", false},
		{"30m-fixed", true}, {"30m-required-fixed", true}, {"10-preferred-fixed", true}, {"0-fixed", true},
		{"30m-fixed-required", false}, {"30m-fixed-fixed", false}, {"fixed", false}, {"30m-Fixed", false}, {"30m-workload", false},
	} {
		if got := label.MatchString(tc.value); got != tc.ok {
			t.Errorf("label %q: accepted %v, want %v", tc.value, got, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		rest, fixed := strings.CutSuffix(tc.value, "-"+contract.RetentionFixed)
		duration, mode, _ := strings.Cut(rest, "-")
		if fixed != regexp.MustCompile(`-fixed$`).MatchString(tc.value) {
			t.Errorf("label %q: -fixed read as %v", tc.value, fixed)
		}
		d, err := contract.ParseReservedDuration(duration)
		if err != nil {
			t.Errorf("label %q: the plugin refuses the duration %q it would add: %v", tc.value, duration, err)
		} else if zero.MatchString(duration) != (d == 0) {
			t.Errorf("label %q: the policy reads %q as zero: %v; the plugin as %v", tc.value, duration, zero.MatchString(duration), d)
		}
		if mode != "" && mode != contract.PlacementRequired && mode != contract.PlacementPreferred {
			t.Errorf("label %q: placement %q", tc.value, mode)
		}
	}
}

// The policies spell the keys checkpointd and the plugin use (contract/),
// the cluster's default is the first variable (the documented kustomize
// patch replaces /spec/variables/0/expression; Helm its line), empty.
func TestStatefulSetPolicyUsesTheContract(t *testing.T) {
	m, v := statefulSetPolicies(t)
	if vs := m.Spec.Variables; len(vs) == 0 || vs[0].Name != "clusterDefault" || vs[0].Expression != "''" {
		t.Errorf("the first variable of stickyip-statefulsets is %+v, want clusterDefault = ''", vs[:min(1, len(vs))])
	}
	var cel strings.Builder
	for _, c := range m.Spec.MatchConditions {
		cel.WriteString(c.Expression + "\n")
	}
	for _, x := range m.Spec.Variables {
		cel.WriteString(x.Expression + "\n")
	}
	cel.WriteString(m.Spec.Mutations[0].JSONPatch.Expression)
	esc := func(k string) string { return strings.ReplaceAll(k, "/", "~1") }
	for _, want := range []string{
		"'" + contract.LabelStatefulSets + "'", "'" + contract.AnnotationReservedDuration + "'", "'" + contract.AnnotationPlacement + "'",
		"'" + contract.AnnotationDurationFrom + "'", "'" + contract.AnnotationConfigMirror + "'",
		"/metadata/annotations/" + esc(contract.AnnotationReservedDuration), "/metadata/annotations/" + esc(contract.AnnotationPlacement),
		"/metadata/annotations/" + esc(contract.AnnotationDurationFrom),
		"'" + contract.DurationFromNamespace + "'", "'" + contract.DurationFromCluster + "'",
		"(-(" + contract.PlacementRequired + "|" + contract.PlacementPreferred + "))",
		"'" + contract.AnnotationRetention + "'", "/metadata/annotations/" + esc(contract.AnnotationRetention),
		"'" + contract.RetentionFixed + "'", "'-" + contract.RetentionFixed + "'", "(-" + contract.RetentionFixed + ")?$",
	} {
		if !strings.Contains(cel.String(), want) {
			t.Errorf("stickyip-statefulsets does not use %s", want)
		}
	}
	if !strings.Contains(v.Spec.MatchConditions[0].Expression, "'"+contract.LabelStatefulSets+"'") {
		t.Errorf("stickyip-statefulsets-label does not check %s", contract.LabelStatefulSets)
	}
	if m.Spec.FailurePolicy == nil || *m.Spec.FailurePolicy != admissionv1.Ignore || v.Spec.FailurePolicy == nil || *v.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("failure policies: the opt-in must never block a pod (Ignore), the label check must hold (Fail)")
	}
	// A StatefulSet pod is the same in both branches of the match
	// conditions and in the variable that decides.
	sts := regexp.MustCompile(`object\.metadata\.ownerReferences\.exists\(r, .*?'StatefulSet'\)`).FindAllString(m.Spec.MatchConditions[0].Expression, -1)
	if len(sts) != 2 || sts[0] != sts[1] || !strings.Contains(variable(m, "applies"), sts[0]) {
		t.Errorf("the opt-in's match conditions and its variable applies take different pods for StatefulSet pods: %q", sts)
	}
}

// The opt-in's hint (the binding stickyip-statefulsets-shards) is
// placement-policy.yaml's hint, copied: the same identity, lookup, node and
// terms, the same zero test, the same shards as parameters; it serves
// exactly the namespaces the hint's own binding leaves out, so that no pod
// gets a hint twice, and the other namespaces pay nothing for the opt-in. A
// change of the hint that is not made in the copy fails here.
func TestStatefulSetHintIsTheHint(t *testing.T) {
	docs := placementDocs(t)
	m, _ := statefulSetPolicies(t)
	hint := docs["MutatingAdmissionPolicy/stickyip-placement"].(*admissionv1.MutatingAdmissionPolicy)
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	if variable(m, "key") == "" || variable(m, "key") != variable(hint, "key") {
		t.Errorf("variable key: the opt-in's %q, the hint's %q", variable(m, "key"), variable(hint, "key"))
	}
	if got, want := variable(m, "node"), "variables.reserved ? ("+variable(hint, "node")+") : ''"; got != want {
		t.Errorf("variable node: %q, want %q", got, want)
	}
	if got, want := flat(m.Spec.Mutations[0].JSONPatch.Expression), flat(hint.Spec.Mutations[0].JSONPatch.Expression); !strings.HasSuffix(got, ": ( "+want+")") {
		t.Errorf("the opt-in's mutation does not end with the hint's:\n%s\nwant it to end with\n%s", got, want)
	}
	cond := flat(hint.Spec.MatchConditions[0].Expression)
	lookup := cond[max(0, strings.Index(cond, "has(params.data)")):]
	zero := regexp.MustCompile(`size\(object[^)]*\) <= \d+ && !object\.metadata\.annotations\[[^]]*\]\.matches\('[^']*'\)`).FindString(cond)
	if !strings.HasSuffix(lookup, "in params.data)") || zero == "" {
		t.Fatalf("the hint's match condition: lookup %q, zero test %q", lookup, zero)
	}
	for _, want := range []string{lookup, zero} {
		if !strings.Contains(flat(m.Spec.MatchConditions[0].Expression), want) {
			t.Errorf("the opt-in's match conditions lack the hint's %s", want)
		}
	}
	if !strings.Contains(flat(variable(m, "reserved")), strings.ReplaceAll(zero, "object.metadata.annotations", "variables.annotations")) {
		t.Errorf("the opt-in's variable reserved lacks the hint's zero test %s", zero)
	}
	if m.Spec.ReinvocationPolicy != admissionv1.NeverReinvocationPolicy || hint.Spec.ReinvocationPolicy != admissionv1.NeverReinvocationPolicy {
		t.Error("a reinvoked hint would add its term again")
	}
	selector := func(b *admissionv1.MutatingAdmissionPolicyBinding) string {
		if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
			return "every namespace"
		}
		return fmt.Sprint(b.Spec.MatchResources.NamespaceSelector.MatchExpressions)
	}
	hintB := docs["MutatingAdmissionPolicyBinding/stickyip-placement-shards"].(*admissionv1.MutatingAdmissionPolicyBinding)
	optIn := docs["MutatingAdmissionPolicyBinding/stickyip-statefulsets"].(*admissionv1.MutatingAdmissionPolicyBinding)
	optInHint := docs["MutatingAdmissionPolicyBinding/stickyip-statefulsets-shards"].(*admissionv1.MutatingAdmissionPolicyBinding)
	labelled := "[{" + contract.LabelStatefulSets + " Exists []}]"
	if selector(hintB) != "[{"+contract.LabelStatefulSets+" DoesNotExist []}]" || selector(optIn) != labelled || selector(optInHint) != labelled {
		t.Errorf("namespaces: the hint's binding %s, the opt-in's %s and %s; want the labelled ones for the opt-in's, the others for the hint's",
			selector(hintB), selector(optIn), selector(optInHint))
	}
	if optIn.Spec.ParamRef != nil || optInHint.Spec.ParamRef == nil || optInHint.Spec.ParamRef.String() != hintB.Spec.ParamRef.String() {
		t.Errorf("parameters: the opt-in %v (want none: params null), its hint %v (want the hint's, %v)", optIn.Spec.ParamRef, optInHint.Spec.ParamRef, hintB.Spec.ParamRef)
	}
}
