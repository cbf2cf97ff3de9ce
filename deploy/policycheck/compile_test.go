package policycheck

import (
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"
)

// compiled is a policy's CEL as kube-apiserver compiles it when the policy
// is loaded: the composited compiler (variables first, each typed from its
// expression), then the match conditions, then what the policy's kind
// evaluates (validations, their messages and audit annotations; mutations
// with the JSONPatch types and library). errs names every expression that
// does not compile, as the API server would report it at admission.
type compiled struct {
	compiler  *plugincel.CompositedCompiler
	opts      plugincel.OptionalVariableDeclarations
	match     plugincel.ConditionEvaluator // nil: no match conditions
	mutations []plugincel.MutatingEvaluator
	errs      []error
	n         int // expressions compiled
	// For each expression's own cost (admission_test.go): the compiled
	// variables, and the match conditions and mutations compiled alone.
	vars                 map[string]plugincel.CompilationResult
	matchExprs, mutExprs []expression
}

// newCompiled starts a policy's compilation with its variables, as both
// admission plugins do (HasAuthorizer always; params when it has a
// paramKind).
func newCompiled(t testing.TB, name string, params bool, vars []admissionv1.Variable) *compiled {
	t.Helper()
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	out := &compiled{compiler: c, opts: plugincel.OptionalVariableDeclarations{HasParams: params, HasAuthorizer: true}, vars: map[string]plugincel.CompilationResult{}}
	for _, v := range vars {
		r := c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, out.opts, environment.StoredExpressions)
		out.check(name, "variable "+v.Name, []error{errOf(r)})
		out.vars[v.Name] = r
	}
	return out
}

func errOf(r plugincel.CompilationResult) error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}

func (c *compiled) check(policy, what string, errs []error) {
	c.n++
	for _, err := range errs {
		if err != nil {
			c.errs = append(c.errs, fmt.Errorf("%s, %s: %w", policy, what, err))
		}
	}
}

// matchConditions compiles conds as both plugins do (matchconditions'
// accessor: a bool).
func (c *compiled) matchConditions(t testing.TB, policy string, conds []admissionv1.MatchCondition) {
	if len(conds) == 0 {
		return
	}
	acc := make([]plugincel.ExpressionAccessor, len(conds))
	for i := range conds {
		acc[i] = (*matchconditions.MatchCondition)(&conds[i])
	}
	c.match = c.compiler.CompileCondition(acc, c.opts, environment.StoredExpressions)
	c.check(policy, fmt.Sprintf("%d match conditions", len(conds)), c.match.CompilationErrors())
	if len(c.match.CompilationErrors()) == 0 {
		c.matchExprs = matchExpressions(t, c.compiler, c.opts, conds)
	}
}

// compileMutating compiles p as the mutating admission plugin does
// (k8s.io/apiserver .../policy/mutating compilePolicy): its variables, its
// match conditions, and each JSONPatch mutation in the environment with the
// JSONPatch and Object types (its accessor: a list of JSONPatch).
func compileMutating(t testing.TB, p *admissionv1.MutatingAdmissionPolicy) *compiled {
	c := newCompiled(t, p.Name, p.Spec.ParamKind != nil, p.Spec.Variables)
	c.matchConditions(t, p.Name, p.Spec.MatchConditions)
	opts := c.opts
	opts.HasPatchTypes = true
	for i, m := range p.Spec.Mutations {
		if m.PatchType != admissionv1.PatchTypeJSONPatch || m.JSONPatch == nil {
			c.errs = append(c.errs, fmt.Errorf("%s, mutation %d: patch type %s; the checks here read JSONPatch mutations only", p.Name, i, m.PatchType))
			continue
		}
		acc := &patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}
		ev := c.compiler.CompileMutatingEvaluator(acc, opts, environment.StoredExpressions)
		c.check(p.Name, fmt.Sprintf("mutation %d (jsonPatch)", i), ev.CompilationErrors())
		c.mutations = append(c.mutations, ev)
		if len(ev.CompilationErrors()) == 0 {
			c.mutExprs = append(c.mutExprs, compiledExpressions(t, c.compiler, opts, []string{fmt.Sprintf("mutation %d", i)}, []plugincel.ExpressionAccessor{acc})...)
		}
	}
	return c
}

// compileValidating compiles p as the validating admission plugin does
// (.../policy/validating compilePolicy): validations and audit annotations
// with the authorizer, message expressions without it (a string).
func compileValidating(t testing.TB, p *admissionv1.ValidatingAdmissionPolicy) *compiled {
	c := newCompiled(t, p.Name, p.Spec.ParamKind != nil, p.Spec.Variables)
	c.matchConditions(t, p.Name, p.Spec.MatchConditions)
	noAuthz := c.opts
	noAuthz.HasAuthorizer = false
	for i, v := range p.Spec.Validations {
		ev := c.compiler.CompileCondition([]plugincel.ExpressionAccessor{&validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}}, c.opts, environment.StoredExpressions)
		c.check(p.Name, fmt.Sprintf("validation %d", i), ev.CompilationErrors())
		if v.MessageExpression != "" {
			ev := c.compiler.CompileCondition([]plugincel.ExpressionAccessor{&validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}}, noAuthz, environment.StoredExpressions)
			c.check(p.Name, fmt.Sprintf("validation %d's messageExpression", i), ev.CompilationErrors())
		}
	}
	for _, a := range p.Spec.AuditAnnotations {
		ev := c.compiler.CompileCondition([]plugincel.ExpressionAccessor{&validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}}, c.opts, environment.StoredExpressions)
		c.check(p.Name, "audit annotation "+a.Key, ev.CompilationErrors())
	}
	return c
}

// Every expression of deploy/placement compiles as kube-apiserver compiles
// it, with its own compilers for each kind of policy: variables, match
// conditions, validations with their messages, and the mutations' JSON
// patches (issue 50: those were never compiled; a typo there failed only in
// the e2e tier, where the hint silently did nothing under failurePolicy
// Ignore).
func TestEveryExpressionCompiles(t *testing.T) {
	ps := load(t)
	n, mutations := 0, 0
	for _, p := range ps.validating {
		c := compileValidating(t, p)
		n += c.n
		for _, err := range c.errs {
			t.Error(err)
		}
	}
	for _, p := range ps.mutating {
		c := compileMutating(t, p)
		n += c.n
		mutations += len(c.mutations)
		for _, err := range c.errs {
			t.Error(err)
		}
	}
	if n < 50 || mutations != 5 {
		t.Errorf("compiled %d expressions, %d of them mutations (want 5: placement-policy.yaml's two, optin-policy.yaml's one, index-policy.yaml's two): the policies were not read", n, mutations)
	}
	t.Logf("%d expressions compiled as kube-apiserver %s compiles them, %d of them JSON patches", n, environment.DefaultCompatibilityVersion(), mutations)
}
