package policycheck

// This file is the same in deploy/policycheck (Kubernetes 1.37's CEL
// libraries) and deploy/policycheck/k136 (1.36's): it reads deploy/placement's
// policies and testdata/cases.json and runs each case through the API
// server's own code: the generic policy matcher (the policy's constraints,
// the binding's selectors), the parameters a binding's selector picks, the
// plugins' compilers, the match conditions' matcher, the JSON patcher, the
// validator. Only version_test.go differs (what the two versions' APIs do
// not share); TestRunnerIsShared (policycheck) holds the copies equal.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionapiv1 "k8s.io/api/admission/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
)

// hook is one policy with one of its bindings, compiled as its admission
// plugin compiles it (validating/plugin.go, mutating/compilation.go
// compilePolicy), its conditions wrapped in spenders that record what each
// evaluation takes from its budget.
type hook struct {
	policy, binding string
	definition      generic.PolicyAccessor
	bindingAccessor generic.BindingAccessor
	failurePolicy   admissionv1.FailurePolicyType
	// compiler makes a mutating invocation's composition context (the
	// variables its mutations read), as the dispatcher does; conditions
	// make their own.
	compiler *plugincel.CompositedCompiler
	match    *spender // nil: no match conditions
	matcher  matchconditions.Matcher

	// A validating policy.
	validator             validating.Validator
	validations, messages *spender
	// A mutating policy.
	mutations []*mutationSpender
	patchers  []patch.Patcher

	// Each expression alone, for its own cost (with the variables it reads).
	alone []aloneExpr
}

// aloneExpr is one expression of a policy compiled alone: a condition
// (match condition, validation, message) or a mutation.
type aloneExpr struct {
	name      string
	stage     string // "match", "call" or "message": when the plugin evaluates it
	cond      plugincel.ConditionEvaluator
	mutation  plugincel.MutatingEvaluator
	authorize bool
}

// spender is a condition as a plugin evaluates it, recording what its last
// evaluation took from the budget it was given (-1: it failed).
type spender struct {
	plugincel.ConditionEvaluator
	spent int64
}

func (s *spender) ForInput(ctx context.Context, vattr *admission.VersionedAttributes, req *admissionapiv1.AdmissionRequest, vars plugincel.OptionalVariableBindings, ns *corev1.Namespace, budget int64) ([]plugincel.EvaluationResult, int64, error) {
	res, left, err := s.ConditionEvaluator.ForInput(ctx, vattr, req, vars, ns, budget)
	s.spent = budget - left
	if err != nil {
		s.spent = -1
	}
	return res, left, err
}

// mutationSpender is spender for a mutation.
type mutationSpender struct {
	plugincel.MutatingEvaluator
	spent int64
}

func (s *mutationSpender) ForInput(ctx context.Context, vattr *admission.VersionedAttributes, req *admissionapiv1.AdmissionRequest, vars plugincel.OptionalVariableBindings, ns *corev1.Namespace, budget int64) (plugincel.EvaluationResult, int64, error) {
	res, left, err := s.MutatingEvaluator.ForInput(ctx, vattr, req, vars, ns, budget)
	s.spent = budget - left
	if err != nil {
		s.spent = -1
	}
	return res, left, err
}

// placement is deploy/placement's admission policies, in the order its
// Kustomization applies them, each with each of its bindings.
type placement struct {
	validating, mutating []*hook
	policies             []any // the decoded policies, for the compile checks
}

// defaultMatchResources sets what kube-apiserver defaults in a policy's or
// binding's match resources (pkg/apis/admissionregistration/v1
// SetDefaults_MatchResources), which the policy matcher requires.
func defaultMatchResources(m *admissionv1.MatchResources) {
	if m == nil {
		return
	}
	if m.MatchPolicy == nil {
		p := admissionv1.Equivalent
		m.MatchPolicy = &p
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
}

// loadPlacement decodes, strictly, the admission policies and bindings of
// the files placementDir's Kustomization lists, and compiles each pair.
func loadPlacement(t testing.TB) *placement {
	t.Helper()
	kust, err := os.ReadFile(filepath.Join(placementDir, "Kustomization"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(kust, &k); err != nil {
		t.Fatal(err)
	}
	var vaps []*admissionv1.ValidatingAdmissionPolicy
	var maps []*admissionv1.MutatingAdmissionPolicy
	var vbs []*admissionv1.ValidatingAdmissionPolicyBinding
	var mbs []*admissionv1.MutatingAdmissionPolicyBinding
	for _, f := range k.Resources {
		data, err := os.ReadFile(filepath.Join(placementDir, f))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var head struct{ Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj any
			switch head.Kind {
			case "ValidatingAdmissionPolicy":
				p := &admissionv1.ValidatingAdmissionPolicy{}
				vaps, obj = append(vaps, p), p
			case "MutatingAdmissionPolicy":
				p := &admissionv1.MutatingAdmissionPolicy{}
				maps, obj = append(maps, p), p
			case "ValidatingAdmissionPolicyBinding":
				b := &admissionv1.ValidatingAdmissionPolicyBinding{}
				vbs, obj = append(vbs, b), b
			case "MutatingAdmissionPolicyBinding":
				b := &admissionv1.MutatingAdmissionPolicyBinding{}
				mbs, obj = append(mbs, b), b
			default:
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: %s: %v", f, head.Kind, err)
			}
		}
	}
	out := &placement{}
	for _, p := range vaps {
		defaultMatchResources(p.Spec.MatchConstraints)
		out.policies = append(out.policies, p)
		for _, b := range vbs {
			if b.Spec.PolicyName == p.Name {
				defaultMatchResources(b.Spec.MatchResources)
				out.validating = append(out.validating, compileValidating(t, p, b))
			}
		}
	}
	for _, p := range maps {
		defaultMatchResources(p.Spec.MatchConstraints)
		out.policies = append(out.policies, p)
		for _, b := range mbs {
			if b.Spec.PolicyName == p.Name {
				defaultMatchResources(b.Spec.MatchResources)
				out.mutating = append(out.mutating, compileMutating(t, p, b))
			}
		}
	}
	return out
}

// newCompiler is the composited compiler both plugins make for a policy,
// its variables compiled and stored.
func newCompiler(t testing.TB, vars []admissionv1.Variable, opts plugincel.OptionalVariableDeclarations) *plugincel.CompositedCompiler {
	t.Helper()
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions)
	}
	return c
}

// compileMatch compiles the match conditions of a policy into h, as both
// plugins do, and each alone.
func (h *hook) compileMatch(c *plugincel.CompositedCompiler, conds []admissionv1.MatchCondition, opts plugincel.OptionalVariableDeclarations, kind string) {
	if len(conds) == 0 {
		return
	}
	acc := make([]plugincel.ExpressionAccessor, len(conds))
	for i := range conds {
		acc[i] = (*matchconditions.MatchCondition)(&conds[i])
		h.alone = append(h.alone, aloneExpr{name: "match condition " + conds[i].Name, stage: "match", authorize: true,
			cond: c.CompileCondition(acc[i:i+1], opts, environment.StoredExpressions)})
	}
	h.match = &spender{ConditionEvaluator: c.CompileCondition(acc, opts, environment.StoredExpressions)}
	fp := h.failurePolicy
	h.matcher = matchconditions.NewMatcher(h.match, &fp, "policy", kind, h.policy)
}

func compileValidating(t testing.TB, p *admissionv1.ValidatingAdmissionPolicy, b *admissionv1.ValidatingAdmissionPolicyBinding) *hook {
	t.Helper()
	opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	noAuthz := opts
	noAuthz.HasAuthorizer = false
	h := &hook{policy: p.Name, binding: b.Name, failurePolicy: admissionv1.Fail,
		definition: validating.NewValidatingAdmissionPolicyAccessor(p), bindingAccessor: validating.NewValidatingAdmissionPolicyBindingAccessor(b)}
	if p.Spec.FailurePolicy != nil {
		h.failurePolicy = *p.Spec.FailurePolicy
	}
	c := newCompiler(t, p.Spec.Variables, opts)
	h.compileMatch(c, p.Spec.MatchConditions, opts, "validate")
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		h.alone = append(h.alone, aloneExpr{name: fmt.Sprintf("validation %d", i), stage: "call", authorize: true,
			cond: c.CompileCondition(validations[i:i+1], opts, environment.StoredExpressions)})
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
			h.alone = append(h.alone, aloneExpr{name: fmt.Sprintf("validation %d's message", i), stage: "message",
				cond: c.CompileCondition(messages[i:i+1], noAuthz, environment.StoredExpressions)})
		}
	}
	audit := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audit[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	h.validations = &spender{ConditionEvaluator: c.CompileCondition(validations, opts, environment.StoredExpressions)}
	h.messages = &spender{ConditionEvaluator: c.CompileCondition(messages, noAuthz, environment.StoredExpressions)}
	fp := h.failurePolicy
	h.validator = validating.NewValidator(h.validations, h.matcher, c.CompileCondition(audit, opts, environment.StoredExpressions), h.messages, &fp, nil)
	return h
}

func compileMutating(t testing.TB, p *admissionv1.MutatingAdmissionPolicy, b *admissionv1.MutatingAdmissionPolicyBinding) *hook {
	t.Helper()
	opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	h := &hook{policy: p.Name, binding: b.Name, failurePolicy: admissionv1.Fail,
		definition: mutating.NewMutatingAdmissionPolicyAccessor(p), bindingAccessor: mutating.NewMutatingAdmissionPolicyBindingAccessor(b)}
	if p.Spec.FailurePolicy != nil {
		h.failurePolicy = *p.Spec.FailurePolicy
	}
	c := newCompiler(t, p.Spec.Variables, opts)
	h.compiler = c
	h.compileMatch(c, p.Spec.MatchConditions, opts, "validate") // as mutating/compilation.go names it
	patchOpts := opts
	patchOpts.HasPatchTypes = true
	for i, m := range p.Spec.Mutations {
		if m.PatchType != admissionv1.PatchTypeJSONPatch || m.JSONPatch == nil {
			t.Fatalf("%s, mutation %d: patch type %s; the checks here read JSONPatch mutations only", p.Name, i, m.PatchType)
		}
		acc := &patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}
		s := &mutationSpender{MutatingEvaluator: c.CompileMutatingEvaluator(acc, patchOpts, environment.StoredExpressions)}
		h.mutations = append(h.mutations, s)
		h.patchers = append(h.patchers, patch.NewJSONPatcher(s))
		h.alone = append(h.alone, aloneExpr{name: fmt.Sprintf("mutation %d", i), stage: "call", authorize: true,
			mutation: c.CompileMutatingEvaluator(acc, patchOpts, environment.StoredExpressions)})
	}
	return h
}

// Every expression of deploy/placement compiles as kube-apiserver compiles
// it twice: when the policy is created (API validation: every expression
// as a new one, the match conditions without the variables) and when the
// plugin loads it (stored expressions, the composited compilers, the
// mutations with the JSONPatch and Object types). A typo in a mutation
// would otherwise show only on a real API server, where the hint, under
// failurePolicy Ignore, silently does nothing. Match condition names are
// qualified names (the API's validation).
func TestEveryExpressionCompiles(t *testing.T) {
	ps := loadPlacement(t)
	n := 0
	check := func(policy, what string, err error) {
		n++
		if err != nil {
			t.Errorf("kube-apiserver %s: %s, %s: %v", kubeMinor, policy, what, err)
		}
	}
	errOf := func(r plugincel.CompilationResult) error {
		if r.Error != nil {
			return r.Error
		}
		return nil
	}
	for _, obj := range ps.policies {
		var name string
		var paramKind *admissionv1.ParamKind
		var vars []admissionv1.Variable
		var conds []admissionv1.MatchCondition
		var exprs []plugincel.ExpressionAccessor
		var patches []string
		switch p := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			name, paramKind, vars, conds = p.Name, p.Spec.ParamKind, p.Spec.Variables, p.Spec.MatchConditions
			for _, v := range p.Spec.Validations {
				exprs = append(exprs, &validating.ValidationCondition{Expression: v.Expression})
				if v.MessageExpression != "" {
					exprs = append(exprs, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
				}
			}
		case *admissionv1.MutatingAdmissionPolicy:
			name, paramKind, vars, conds = p.Name, p.Spec.ParamKind, p.Spec.Variables, p.Spec.MatchConditions
			for _, m := range p.Spec.Mutations {
				patches = append(patches, strings.TrimSpace(m.JSONPatch.Expression))
			}
		}
		for _, env := range []environment.Type{environment.NewExpressions, environment.StoredExpressions} {
			opts := plugincel.OptionalVariableDeclarations{HasParams: paramKind != nil, HasAuthorizer: true}
			c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vars {
				check(name, fmt.Sprintf("variable %s (%s)", v.Name, env), errOf(c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, env)))
			}
			// Created: match conditions by a compiler without variables.
			stateless := plugincel.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
			for i := range conds {
				mc := (*matchconditions.MatchCondition)(&conds[i])
				if env == environment.NewExpressions {
					check(name, "match condition "+conds[i].Name+" (created)", errOf(stateless.CompileCELExpression(mc, opts, env)))
					if errs := validation.IsQualifiedName(conds[i].Name); len(errs) > 0 {
						check(name, "match condition name "+conds[i].Name, fmt.Errorf("%v", errs))
					}
				} else {
					check(name, "match condition "+conds[i].Name+" (loaded)", errOf(c.CompileCELExpression(mc, opts, env)))
				}
			}
			for _, e := range exprs {
				o := opts
				if _, ok := e.(*validating.MessageExpressionCondition); ok {
					o.HasAuthorizer = false
				}
				check(name, fmt.Sprintf("%q (%s)", clip(e.GetExpression()), env), errOf(c.CompileCELExpression(e, o, env)))
			}
			for i, p := range patches {
				o := opts
				o.HasPatchTypes = true
				check(name, fmt.Sprintf("mutation %d (%s)", i, env), errOf(c.CompileCELExpression(&patch.JSONPatchCondition{Expression: p}, o, env)))
			}
		}
	}
	if len(ps.validating) == 0 || len(ps.mutating) == 0 || n < 40 {
		t.Fatalf("%d validating and %d mutating hooks, %d compilations: deploy/placement was not read", len(ps.validating), len(ps.mutating), n)
	}
	t.Logf("%d compilations as kube-apiserver %s makes them", n, kubeMinor)
}

// Case is one admission request, the objects the API server has for it,
// and what deploy/placement's policies must make of it. cases.json holds
// them (policycheck writes it from cases_test.go; both modules run it).
type Case struct {
	Name      string
	Operation admission.Operation
	// Resource is the request's resource, with its subresource: pods,
	// pods/status, namespaces, noderecords.
	Resource string
	User     struct {
		Name   string
		Groups []string
	}
	// Object and OldObject are the request's; a *File names a gzipped
	// JSON file of testdata instead.
	Object, OldObject         json.RawMessage `json:",omitempty"`
	ObjectFile, OldObjectFile string          `json:",omitempty"`
	// Namespace is the request's namespace object (namespaced resources).
	Namespace *corev1.Namespace `json:",omitempty"`
	// Params are the index's shards (ConfigMaps) of the request's namespace.
	Params     []json.RawMessage `json:",omitempty"`
	ParamFiles []string          `json:",omitempty"`
	Want       Want
}

// Want is what the policies make of a case.
type Want struct {
	// Invoked are the policy/binding[/param] invocations whose match
	// conditions held (every one the constraints, bindings and parameters
	// let through, for a policy without match conditions), in order.
	Invoked []string
	// Denied are the beginnings of the API server's refusals, in order.
	Denied []string `json:",omitempty"`
	// Affinity: the pod's spec.affinity after the mutations, when set.
	Affinity json.RawMessage `json:",omitempty"`
	// Annotations: the pod's annotations after the mutations, when set.
	Annotations map[string]string `json:",omitempty"`
}

// readTestdata reads a testdata file, gunzipped when its name ends in .gz.
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdataDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(name, ".gz") {
		return b
	}
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadCases reads testdata/cases.json.
func loadCases(t testing.TB) []Case {
	t.Helper()
	var cases []Case
	if err := json.Unmarshal(readTestdata(t, "cases.json"), &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// decode makes the API server's object of a JSON document: a typed one
// for the kinds client-go's scheme knows (the built-in ones, as the API
// server holds them), else unstructured (a custom resource, as the API
// server and its informers hold it).
func decode(t testing.TB, raw []byte) runtime.Object {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	if !scheme.Scheme.Recognizes(u.GroupVersionKind()) {
		return u
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(u.GroupVersionKind())
	return obj
}

// resources are the requests' resources: kind and scope.
var resources = map[string]struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}{
	"pods":        {corev1.SchemeGroupVersion.WithKind("Pod"), true},
	"pods/status": {corev1.SchemeGroupVersion.WithKind("Pod"), true},
	"namespaces":  {corev1.SchemeGroupVersion.WithKind("Namespace"), false},
	"noderecords": {schema.GroupVersionKind{Group: "stickyip.io", Version: "v1", Kind: "NodeRecord"}, false},
	"configmaps":  {corev1.SchemeGroupVersion.WithKind("ConfigMap"), true},
	// noresources: what the keepers of ConfigMap parameters match, which
	// no API server serves.
	"noresources": {schema.GroupVersionKind{Group: "stickyip.io", Version: "v1", Kind: "NoResource"}, true},
}

// invocation is what one hook's evaluation for one parameter cost.
type invocation struct {
	name                  string
	match, call, messages int64
	// The most expensive expression alone, with the variables it reads.
	worst     string
	worstCost int64
}

// result is what the policies made of a case.
type result struct {
	invoked, denied, errs []string
	obj                   runtime.Object
	costs                 []invocation
}

// request is a case as the admission chain receives it.
type request struct {
	attrs     admission.Attributes
	o         admission.ObjectInterfaces
	gvk       schema.GroupVersionKind
	gvr       schema.GroupVersionResource
	namespace *corev1.Namespace // nil: a cluster-scoped resource
	params    []runtime.Object
	matcher   generic.PolicyMatcher
}

// newRequest decodes c into the request the admission chain receives.
func newRequest(t testing.TB, c Case) *request {
	t.Helper()
	res, ok := resources[c.Resource]
	if !ok {
		t.Fatalf("%s: resource %s", c.Name, c.Resource)
	}
	raw := func(r json.RawMessage, file string) []byte {
		if file != "" {
			return readTestdata(t, file)
		}
		return r
	}
	obj, old := decode(t, raw(c.Object, c.ObjectFile)), decode(t, raw(c.OldObject, c.OldObjectFile))
	r := &request{o: admission.NewObjectInterfacesFromScheme(scheme.Scheme), gvk: res.gvk}
	for _, p := range c.Params {
		r.params = append(r.params, decode(t, p))
	}
	for _, f := range c.ParamFiles {
		r.params = append(r.params, decode(t, readTestdata(t, f)))
	}
	nsLister := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	nsName := ""
	if c.Namespace != nil {
		if err := nsLister.Add(c.Namespace); err != nil {
			t.Fatal(err)
		}
		if res.namespaced {
			nsName, r.namespace = c.Namespace.Name, c.Namespace
		}
	}
	meta := obj
	if meta == nil {
		meta = old
	}
	resource, sub, _ := strings.Cut(c.Resource, "/")
	r.gvr = res.gvk.GroupVersion().WithResource(resource)
	var opts runtime.Object = &metav1.CreateOptions{}
	switch c.Operation {
	case admission.Update:
		opts = &metav1.UpdateOptions{}
	case admission.Delete:
		opts = &metav1.DeleteOptions{}
	}
	u := &user.DefaultInfo{Name: c.User.Name, Groups: c.User.Groups}
	r.attrs = admission.NewAttributesRecord(obj, old, res.gvk, nsName, meta.(metav1.Object).GetName(), r.gvr, sub, c.Operation, opts, false, u)
	r.matcher = generic.NewPolicyMatcher(matching.NewMatcher(corelisters.NewNamespaceLister(nsLister), nil))
	return r
}

// run sends c through every hook of ps: the mutating ones, then the
// validating ones on what they made, as kube-apiserver's admission chain
// does (in the order deploy/placement applies them: the API server's
// order among mutating policies is not fixed, and these do not depend on
// it).
func run(t testing.TB, ps *placement, c Case) result {
	t.Helper()
	r := newRequest(t, c)
	attrs, o, gvr, namespace, matcher, params := r.attrs, r.o, r.gvr, r.namespace, r.matcher, r.params
	nsName := attrs.GetNamespace()
	vattr, err := admission.NewVersionedAttributes(attrs, r.gvk, o)
	if err != nil {
		t.Fatal(err)
	}
	out := result{obj: attrs.GetObject()}
	ctx := context.Background()
	each := func(h *hook) []runtime.Object {
		ok, _, _, err := matcher.DefinitionMatches(attrs, o, h.definition)
		if err != nil {
			t.Fatalf("%s: %s: %v", c.Name, h.policy, err)
		}
		if !ok {
			return nil
		}
		if ok, err = matcher.BindingMatches(attrs, o, h.bindingAccessor); err != nil || !ok {
			if err != nil {
				t.Fatalf("%s: %s: %v", c.Name, h.binding, err)
			}
			return nil
		}
		ref := h.bindingAccessor.GetParamRef()
		if ref == nil {
			return []runtime.Object{nil}
		}
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil || ref.Name != "" || ref.Namespace != "" {
			t.Fatalf("%s: %s: the runner reads selectors of the request's namespace only (%v)", c.Name, h.binding, err)
		}
		var picked []runtime.Object
		for _, p := range params {
			m := p.(metav1.Object)
			if m.GetNamespace() == nsName && sel.Matches(labels.Set(m.GetLabels())) {
				picked = append(picked, p)
			}
		}
		return picked // none: ParameterNotFoundAction Allow, the only one here
	}
	label := func(h *hook, p runtime.Object) string {
		if p == nil {
			return h.policy + "/" + h.binding
		}
		return h.policy + "/" + h.binding + "/" + p.(metav1.Object).GetName()
	}
	for _, h := range ps.mutating {
		for _, p := range each(h) {
			if h.match != nil { // a policy without match conditions has none
				h.match.spent = 0
			}
			inv := invocation{name: label(h, p)}
			if h.matcher != nil {
				m := h.matcher.Match(ctx, vattr, p, nil)
				inv.match = h.match.spent
				if m.Error != nil {
					out.errs = append(out.errs, fmt.Sprintf("%s: match conditions: %v", inv.name, m.Error))
					out.costs = append(out.costs, inv)
					continue
				}
				if !m.Matches {
					out.costs = append(out.costs, h.aloneCosts(t, c, inv, vattr, p, namespace, "match"))
					continue
				}
			}
			out.invoked = append(out.invoked, inv.name)
			inv = h.aloneCosts(t, c, inv, vattr, p, namespace, "match", "call")
			ictx := h.compiler.CreateContext(ctx) // mutating/dispatcher.go: one per invocation
			for i, pt := range h.patchers {
				got, err := pt.Patch(ictx, patch.Request{MatchedResource: gvr, VersionedAttributes: vattr, ObjectInterfaces: o,
					OptionalVariables: plugincel.OptionalVariableBindings{VersionedParams: p}, Namespace: namespace}, celconfig.RuntimeCELCostBudget)
				inv.call += h.mutations[i].spent
				if err != nil {
					out.errs = append(out.errs, fmt.Sprintf("%s: mutation %d: %v", inv.name, i, err))
					break
				}
				setObject(vattr, got)
				out.obj = got
			}
			out.costs = append(out.costs, inv)
		}
	}
	for _, h := range ps.validating {
		for _, p := range each(h) {
			for _, s := range []*spender{h.match, h.validations, h.messages} {
				if s != nil {
					s.spent = 0
				}
			}
			r := h.validator.Validate(ctx, gvr, vattr, p, namespace, celconfig.RuntimeCELCostBudget, nil)
			inv := invocation{name: label(h, p), call: h.validations.spent, messages: h.messages.spent}
			if h.match != nil {
				inv.match = h.match.spent
			}
			matched := len(r.Decisions) > 0
			stages := []string{"match"}
			if matched {
				out.invoked = append(out.invoked, inv.name)
				stages = append(stages, "call", "message")
			}
			out.costs = append(out.costs, h.aloneCosts(t, c, inv, vattr, p, namespace, stages...))
			for _, d := range r.Decisions {
				if d.Evaluation == validating.EvalError {
					out.errs = append(out.errs, fmt.Sprintf("%s: %s", inv.name, d.Message))
				}
				if d.Action == validating.ActionDeny {
					// validating/dispatcher.go's message
					out.denied = append(out.denied, fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", h.policy, h.binding, d.Message))
				}
			}
		}
	}
	return out
}

// aloneCosts evaluates each expression of h of the given stages alone on
// the request, as a plugin evaluates a condition or a mutation (a
// composition context of its own: the variables it reads are evaluated
// and paid for with it), and records the most expensive in inv. Each
// alone stays within PerCallLimit exactly when each expression and each
// variable it reads does (the API server checks each program against it):
// an error here is the API server's refusal to evaluate.
func (h *hook) aloneCosts(t testing.TB, c Case, inv invocation, vattr *admission.VersionedAttributes, p runtime.Object, ns *corev1.Namespace, stages ...string) invocation {
	t.Helper()
	req := plugincel.CreateAdmissionRequest(vattr.Attributes, metav1.GroupVersionResource(vattr.GetResource()), metav1.GroupVersionKind(vattr.VersionedKind))
	for _, e := range h.alone {
		if !slices.Contains(stages, e.stage) {
			continue
		}
		vars := plugincel.OptionalVariableBindings{VersionedParams: p}
		ctx := context.Background()
		budget := int64(celconfig.RuntimeCELCostBudget)
		var left int64
		var err error
		if e.cond != nil {
			var res []plugincel.EvaluationResult
			var nsObj *corev1.Namespace // the matcher evaluates match conditions without it
			if e.stage != "match" {
				nsObj = plugincel.CreateNamespaceObject(ns)
			}
			res, left, err = e.cond.ForInput(ctx, vattr, req, vars, nsObj, budget)
			if err == nil && res[0].Error != nil {
				err = res[0].Error
			}
		} else {
			var res plugincel.EvaluationResult
			res, left, err = e.mutation.ForInput(h.compiler.CreateContext(ctx), vattr, req, vars, ns, budget)
			if err == nil && res.Error != nil {
				err = res.Error
			}
		}
		if err != nil {
			t.Errorf("kube-apiserver %s, %s: %s, %s alone: %v", kubeMinor, c.Name, inv.name, e.name, err)
			continue
		}
		if spent := budget - left; spent > inv.worstCost {
			inv.worst, inv.worstCost = e.name, spent
		}
	}
	return inv
}

// TestPolicies runs every case of testdata/cases.json through
// deploy/placement's policies: what each invokes, refuses and makes, and
// that no evaluation fails (a failed one is out of the API server's CEL
// limits, or broken); then prints, for each policy, its most expensive
// invocation over the cases (FIGURE cost) against the API server's limits
// and fails when one is over them.
func TestPolicies(t *testing.T) {
	ps := loadPlacement(t)
	worst := map[string]struct {
		inv  invocation
		name string
	}{}
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			r := run(t, ps, c)
			for _, e := range r.errs {
				t.Errorf("kube-apiserver %s fails an evaluation: %s", kubeMinor, e)
			}
			if !slices.Equal(r.invoked, c.Want.Invoked) {
				t.Errorf("invoked %q, want %q", r.invoked, c.Want.Invoked)
			}
			if len(r.denied) != len(c.Want.Denied) {
				t.Errorf("denied %q, want %q", r.denied, c.Want.Denied)
			} else {
				for i := range r.denied {
					if !strings.HasPrefix(r.denied[i], c.Want.Denied[i]) {
						t.Errorf("denied %q, want it to start %q", r.denied[i], c.Want.Denied[i])
					}
				}
			}
			if pod, ok := r.obj.(*corev1.Pod); ok && (c.Want.Affinity != nil || c.Want.Annotations != nil) {
				if c.Want.Affinity != nil {
					got, _ := json.Marshal(pod.Spec.Affinity)
					if !jsonEqual(t, got, c.Want.Affinity) {
						t.Errorf("affinity\n%s\nwant\n%s", got, c.Want.Affinity)
					}
				}
				if c.Want.Annotations != nil && !mapsEqual(pod.Annotations, c.Want.Annotations) {
					t.Errorf("annotations %v, want %v", pod.Annotations, c.Want.Annotations)
				}
			} else if c.Want.Affinity != nil || c.Want.Annotations != nil {
				t.Errorf("the case wants a pod, the policies made a %T", r.obj)
			}
			for _, inv := range r.costs {
				if inv.match > celconfig.RuntimeCELCostBudgetMatchConditions || inv.call+inv.messages > celconfig.RuntimeCELCostBudget ||
					inv.worstCost > celconfig.PerCallLimit {
					t.Errorf("kube-apiserver %s: %s over the API server's CEL limits: %s", kubeMinor, inv.name, inv)
				}
				policy, _, _ := strings.Cut(inv.name, "/")
				w := worst[policy]
				if inv.match+inv.call+inv.messages+inv.worstCost > w.inv.match+w.inv.call+w.inv.messages+w.inv.worstCost {
					worst[policy] = struct {
						inv  invocation
						name string
					}{inv, c.Name}
				}
			}
		})
	}
	var names []string
	for p := range worst {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		t.Logf("FIGURE cost %s %s: %s (case %q)", kubeMinor, p, worst[p].inv, worst[p].name)
	}
	for _, h := range append(slices.Clone(ps.validating), ps.mutating...) {
		if _, ok := worst[h.policy]; !ok {
			t.Errorf("no case invokes %s: its cost is not checked", h.policy)
		}
	}
}

func (inv invocation) String() string {
	s := fmt.Sprintf("match conditions %d of %d, ", inv.match, celconfig.RuntimeCELCostBudgetMatchConditions)
	if inv.messages > 0 {
		s += fmt.Sprintf("validations %d + messages %d of %d", inv.call, inv.messages, celconfig.RuntimeCELCostBudget)
	} else {
		s += fmt.Sprintf("call %d of %d", inv.call, celconfig.RuntimeCELCostBudget)
	}
	if inv.worst != "" {
		s += fmt.Sprintf("; the most expensive expression alone (%s, with the variables it reads) %d of %d", inv.worst, inv.worstCost, celconfig.PerCallLimit)
	}
	return s
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// BenchmarkPodStatus is what stickyip-pod-identity adds to a pod status
// update: by a node (every kubelet's, the rule evaluated) and by another
// user (stopped by the match condition), the versioned attributes made
// anew for each request as the API server makes them. Run it in both
// modules to compare 1.36 (the objects converted to unstructured for each
// of the validator's evaluations) and 1.37.
//
//	go test -run '^$' -bench PodStatus -benchmem
func BenchmarkPodStatus(b *testing.B) {
	ps := loadPlacement(b)
	var h *hook
	for _, x := range ps.validating {
		if x.policy == "stickyip-pod-identity" {
			h = x
		}
	}
	cases := map[string]*Case{}
	for _, x := range loadCases(b) {
		switch x.Name {
		case "pod-identity: a node updates a pod's status, its identity unchanged":
			cases["node"] = &x
		case "pod-identity: not a node's update":
			cases["other"] = &x
		}
	}
	if h == nil || len(cases) != 2 {
		b.Fatal("no stickyip-pod-identity, or no cases for it")
	}
	for _, who := range []string{"node", "other"} {
		b.Run(who, func(b *testing.B) {
			r := newRequest(b, *cases[who])
			ctx := context.Background()
			for b.Loop() {
				vattr, err := admission.NewVersionedAttributes(r.attrs, r.gvk, r.o)
				if err != nil {
					b.Fatal(err)
				}
				res := h.validator.Validate(ctx, r.gvr, vattr, nil, r.namespace, celconfig.RuntimeCELCostBudget, nil)
				if who == "node" && (len(res.Decisions) != 1 || res.Decisions[0].Action != validating.ActionAdmit) || who == "other" && len(res.Decisions) != 0 {
					b.Fatalf("decisions %+v", res.Decisions)
				}
			}
		})
	}
}
