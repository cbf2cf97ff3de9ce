package policycheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	admissionapiv1 "k8s.io/api/admission/v1"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/lazy"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/client-go/kubernetes/scheme"
)

// One admission request as the CEL admission plugins see it, run through
// their own evaluators: a mutating policy's invocation (the dispatcher's
// order: match conditions, then each mutation applied by the API server's
// JSON patcher) and a validating policy's (the plugin's validator itself),
// with what each costs as the API server counts it.

// request is one object's create or update by a user.
type request struct {
	op        admission.Operation
	kind      schema.GroupVersionKind
	resource  schema.GroupVersionResource
	user      user.Info
	obj, old  runtime.Object // old nil for a create
	params    runtime.Object // nil: a binding without paramRef
	namespace *corev1.Namespace
	authz     authorizer.UnconditionalAuthorizer // nil: none (the mutating dispatcher's default here)
}

// attributes are r's admission attributes, as the dispatchers hand them to
// the evaluators.
func (r request) attributes() (*admission.VersionedAttributes, *admissionapiv1.AdmissionRequest) {
	var opts runtime.Object = &metav1.CreateOptions{}
	if r.op == admission.Update {
		opts = &metav1.UpdateOptions{}
	}
	meta, err := metaOf(r.obj)
	if err != nil {
		panic(err)
	}
	attrs := admission.NewAttributesRecord(r.obj, r.old, r.kind, meta.GetNamespace(), meta.GetName(), r.resource, "", r.op, opts, false, r.user)
	vattr := &admission.VersionedAttributes{Attributes: attrs, VersionedObject: admission.NewLazyObject(r.obj), VersionedKind: r.kind}
	if r.old != nil {
		vattr.VersionedOldObject = admission.NewLazyObject(r.old)
	}
	return vattr, plugincel.CreateAdmissionRequest(attrs, metav1.GroupVersionResource(r.resource), metav1.GroupVersionKind(r.kind))
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// expression is one compiled expression of a policy, alone, to count its
// own cost: kube-apiserver checks each expression and each variable
// against PerCallLimit apart (a variable's cost is not its reader's).
type expression struct {
	name string
	prg  cel.Program
}

// compiledExpressions compiles each of accessors alone (for its own cost)
// as c compiles it in a condition or a mutation.
func compiledExpressions(t testing.TB, c *plugincel.CompositedCompiler, opts plugincel.OptionalVariableDeclarations, names []string, accessors []plugincel.ExpressionAccessor) []expression {
	t.Helper()
	var out []expression
	for i, a := range accessors {
		r := c.CompileCELExpression(a, opts, environment.StoredExpressions)
		if r.Error != nil {
			t.Fatalf("%s: %v", names[i], r.Error)
		}
		out = append(out, expression{names[i], r.Program})
	}
	return out
}

// matchExpressions compiles each match condition alone, for its cost.
func matchExpressions(t testing.TB, c *plugincel.CompositedCompiler, opts plugincel.OptionalVariableDeclarations, conds []admissionv1.MatchCondition) []expression {
	names := make([]string, len(conds))
	acc := make([]plugincel.ExpressionAccessor, len(conds))
	for i := range conds {
		names[i] = "match condition " + conds[i].Name
		acc[i] = (*matchconditions.MatchCondition)(&conds[i])
	}
	return compiledExpressions(t, c, opts, names, acc)
}

// activation is what an admission plugin's CEL reads, made as the plugins
// make theirs (k8s.io/apiserver .../plugin/cel newActivation), from the
// objects' CEL values the plugin's own evaluation made.
type activation map[string]any

func (a activation) ResolveName(name string) (any, bool) {
	v, ok := a[name]
	return v, ok
}

func (a activation) Parent() interpreter.Activation { return nil }

// pass evaluates exprs in order on r as one evaluation of a plugin's
// condition or mutation does — one activation whose variables are each
// evaluated when first read, once — and returns the own cost of each
// expression and of each variable read, as the API server's cost tracker
// counts it and checks it against PerCallLimit (a variable's cost is not
// its reader's: the composition runs each variable's program apart), and
// their sum, what the evaluation takes from its budget. vattr must have
// been evaluated by a plugin's evaluator (the objects' CEL values are the
// plugin's). A failed expression or variable is reported in errs.
func pass(vars map[string]plugincel.CompilationResult, exprs []expression, vattr *admission.VersionedAttributes, req *admissionapiv1.AdmissionRequest, r request, authz bool) (costs map[string]int64, total int64, errs []error) {
	ctx := context.Background()
	obj, err := vattr.VersionedObject.CELValue()
	if err != nil {
		return nil, 0, []error{err}
	}
	old, err := vattr.VersionedOldObject.CELValue()
	if err != nil {
		return nil, 0, []error{err}
	}
	act := activation{
		plugincel.ObjectVarName: obj, plugincel.OldObjectVarName: old,
		plugincel.RequestVarName:   common.SchemalessTypedToVal(req),
		plugincel.NamespaceVarName: common.SchemalessTypedToVal(plugincel.CreateNamespaceObject(r.namespace)),
	}
	if r.params != nil {
		act[plugincel.ParamsVarName] = common.SchemalessTypedToVal(r.params)
	}
	if authz && r.authz != nil {
		act[plugincel.AuthorizerVarName] = library.NewAuthorizerVal(vattr.GetUserInfo(), r.authz)
		act[plugincel.RequestResourceAuthorizerVarName] = library.NewResourceAuthorizerVal(vattr.GetUserInfo(), r.authz, vattr)
	}
	costs = map[string]int64{}
	// The composition's lazy variables (.../plugin/cel composition.go),
	// each variable's cost taken apart.
	lazyVars := lazy.NewMapValue(types.NewObjectType("kubernetes.variables"))
	for _, name := range slices.Sorted(mapsKeys(vars)) {
		res := vars[name]
		lazyVars.Append(name, func(*lazy.MapValue) ref.Val {
			if res.Error != nil {
				return types.NewErr("composited variable %q fails to compile: %v", name, res.Error)
			}
			v, details, err := res.Program.ContextEval(ctx, act)
			if details != nil && details.ActualCost() != nil {
				costs["variable "+name] = int64(*details.ActualCost())
				total += costs["variable "+name]
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("variable %s: %w", name, err))
				return types.NewErr("composited variable %q fails to evaluate: %v", name, err)
			}
			return v
		})
	}
	act[plugincel.VariableVarName] = lazyVars
	for _, e := range exprs {
		_, details, err := e.prg.ContextEval(ctx, act)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.name, err))
		}
		if details != nil && details.ActualCost() != nil {
			costs[e.name] = int64(*details.ActualCost())
			total += costs[e.name]
		}
	}
	return costs, total, errs
}

// largest returns the name and cost of the most expensive of costs.
func largest(costs map[string]int64) (string, int64) {
	name, most := "", int64(-1)
	for _, n := range slices.Sorted(mapsKeys(costs)) {
		if costs[n] > most {
			name, most = n, costs[n]
		}
	}
	return name, most
}

// merge adds to into each cost of from that is larger (a variable
// evaluated in two passes costs the same in each).
func merge(into, from map[string]int64) {
	for n, c := range from {
		into[n] = max(into[n], c)
	}
}

// spent is what one policy's invocation cost.
type spent struct {
	match    int64            // match conditions, of RuntimeCELCostBudgetMatchConditions
	call     int64            // variables and validations or mutations, of RuntimeCELCostBudget
	messages int64            // message expressions, of what the validations left (a validating policy)
	each     map[string]int64 // each expression's and variable's own, of PerCallLimit
}

func (s spent) String() string {
	name, most := largest(s.each)
	out := fmt.Sprintf("match conditions %d of %d, ", s.match, celconfig.RuntimeCELCostBudgetMatchConditions)
	if s.messages > 0 {
		out += fmt.Sprintf("variables and validations %d + messages %d = %d of %d", s.call, s.messages, s.call+s.messages, celconfig.RuntimeCELCostBudget)
	} else {
		out += fmt.Sprintf("variables and mutations %d of %d", s.call, celconfig.RuntimeCELCostBudget)
	}
	return out + fmt.Sprintf("; the most expensive expression %s, %d of %d", name, most, celconfig.PerCallLimit)
}

// validatingPlugin is a ValidatingAdmissionPolicy as kube-apiserver's
// validating admission plugin compiles it (.../policy/validating
// compilePolicy): one composited compiler, its variables, then the match
// conditions, the validations (one condition, one budget), the audit
// annotations and the message expressions (without the authorizer), in the
// plugin's own validator. Its conditions are handed to the validator
// through spenders, which record the budget each evaluation takes.
type validatingPlugin struct {
	match, validations, messages *spender
	validator                    validating.Validator
	// For each expression's own cost: the compiled variables, and the
	// match conditions, validations and message expressions compiled alone.
	vars                                      map[string]plugincel.CompilationResult
	matchExprs, validationExprs, messageExprs []expression
}

// spender is a condition as the validator evaluates it, recording what its
// last evaluation took from the budget it was given (-1: it failed).
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

func compileValidatingPlugin(t testing.TB, p *admissionv1.ValidatingAdmissionPolicy) *validatingPlugin {
	t.Helper()
	opts := plugincel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	noAuthz := opts
	noAuthz.HasAuthorizer = false
	c, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	out := &validatingPlugin{vars: map[string]plugincel.CompilationResult{}}
	for _, v := range p.Spec.Variables {
		r := c.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions)
		if r.Error != nil {
			t.Fatalf("%s, variable %s: %v", p.Name, v.Name, r.Error)
		}
		out.vars[v.Name] = r
	}
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(p.Spec.MatchConditions))
		for i := range p.Spec.MatchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
		}
		out.match = &spender{ConditionEvaluator: c.CompileCondition(acc, opts, environment.StoredExpressions)}
		matcher = matchconditions.NewMatcher(out.match, p.Spec.FailurePolicy, "policy", "validate", p.Name)
		out.matchExprs = matchExpressions(t, c, opts, p.Spec.MatchConditions)
	}
	validations := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	names := make([]string, len(p.Spec.Validations))
	var messageNames []string
	var messageAccessors []plugincel.ExpressionAccessor
	for i, v := range p.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		names[i] = fmt.Sprintf("validation %d", i)
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
			messageNames, messageAccessors = append(messageNames, fmt.Sprintf("validation %d's message", i)), append(messageAccessors, messages[i])
		}
	}
	audit := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audit[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	out.validations = &spender{ConditionEvaluator: c.CompileCondition(validations, opts, environment.StoredExpressions)}
	out.messages = &spender{ConditionEvaluator: c.CompileCondition(messages, noAuthz, environment.StoredExpressions)}
	out.validator = validating.NewValidator(out.validations, matcher, c.CompileCondition(audit, opts, environment.StoredExpressions), out.messages, p.Spec.FailurePolicy, nil)
	for _, errs := range [][]error{out.validations.CompilationErrors(), out.messages.CompilationErrors()} {
		for _, err := range errs {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	out.validationExprs = compiledExpressions(t, c, opts, names, validations)
	out.messageExprs = compiledExpressions(t, c, noAuthz, messageNames, messageAccessors)
	return out
}

// judge runs r through the validator and returns its decisions and what
// its evaluations took from their budgets (the match conditions', the
// validations', and the message expressions', from what the validations
// left: each a composition context of its own, the messages evaluating the
// variables they read again), and each expression's own cost (pass),
// whose sums must be what the evaluations took.
func (p *validatingPlugin) judge(t testing.TB, r request) (validating.ValidateResult, spent) {
	t.Helper()
	for _, c := range []*spender{p.match, p.validations, p.messages} {
		if c != nil {
			c.spent = 0
		}
	}
	vattr, req := r.attributes()
	res := p.validator.Validate(context.Background(), r.resource, vattr, r.params, r.namespace, celconfig.RuntimeCELCostBudget, r.authz)
	s := spent{call: p.validations.spent, messages: p.messages.spent, each: map[string]int64{}}
	check := func(what string, exprs []expression, authz bool, want int64) {
		if want <= 0 {
			return // not evaluated, or failed: its decisions say so
		}
		costs, total, errs := pass(p.vars, exprs, vattr, req, r, authz)
		merge(s.each, costs)
		// Equal but for the order of a map's keys, which can end a
		// search (exists, all) earlier or later in one evaluation than
		// in the other.
		if len(errs) == 0 && (total < want-want/100 || total > want+want/100) {
			t.Errorf("%s: the expressions' own costs add up to %d, the API server's evaluation took %d: the accounting here is not the API server's", what, total, want)
		}
	}
	if p.match != nil {
		s.match = p.match.spent
		check("match conditions", p.matchExprs, true, s.match)
	}
	check("validations", p.validationExprs, true, s.call)
	check("message expressions", p.messageExprs, false, s.messages)
	return res, s
}

// denials returns the messages of res's refusals, and whether any decision
// is an evaluation error (the policy did not judge: out of budget, or an
// expression failed) rather than a verdict.
func denials(res validating.ValidateResult) (msgs []string, evalErr bool) {
	for _, d := range res.Decisions {
		if d.Evaluation == validating.EvalError {
			evalErr = true
		}
		if d.Action == validating.ActionDeny {
			msgs = append(msgs, d.Message)
		}
	}
	return msgs, evalErr
}

// outcome is what the API server's evaluators did with a mutating
// policy's invocation.
type outcome struct {
	matched                 bool
	matchCost, mutationCost int64
	obj                     runtime.Object // after the mutations
	matchErr, mutationErr   error
	each                    map[string]int64 // each expression's own cost (mutationCosts)
}

// mutate evaluates c (compiled from a mutating policy) for r as the
// mutating admission plugin's dispatcher does: one composition context for
// the invocation, its match conditions within
// RuntimeCELCostBudgetMatchConditions (the matcher's: no namespace), then
// each mutation within RuntimeCELCostBudget, applied as a JSON patch.
// costOnly evaluates the mutations without applying them.
func mutate(t testing.TB, c *compiled, r request, costOnly bool) outcome {
	t.Helper()
	vattr, req := r.attributes()
	vars := plugincel.OptionalVariableBindings{VersionedParams: r.params, Authorizer: r.authz}
	ctx := c.compiler.CreateContext(context.Background())
	out := outcome{matched: true, obj: r.obj}
	if c.match != nil {
		res, left, err := c.match.ForInput(ctx, vattr, req, vars, nil, celconfig.RuntimeCELCostBudgetMatchConditions)
		out.matchCost = celconfig.RuntimeCELCostBudgetMatchConditions - left
		if err != nil {
			out.matchErr = err
			return out
		}
		for _, r := range res {
			if r.Error != nil {
				out.matchErr = r.Error
				return out
			}
			out.matched = out.matched && r.EvalResult.Value() == true
		}
	}
	if !out.matched {
		return out
	}
	for _, m := range c.mutations {
		// The cost, as the patcher's evaluation counts it (variables
		// included)...
		ev, left, err := m.ForInput(ctx, vattr, req, vars, r.namespace, celconfig.RuntimeCELCostBudget)
		out.mutationCost += celconfig.RuntimeCELCostBudget - left
		if err == nil && ev.Error != nil {
			err = ev.Error
		}
		if err != nil {
			out.mutationErr = err
			return out
		}
		if costOnly {
			continue
		}
		// ...and the object it makes, from the API server's JSON patcher.
		got, err := patch.NewJSONPatcher(m).Patch(ctx, patch.Request{
			MatchedResource:     r.resource,
			VersionedAttributes: vattr,
			ObjectInterfaces:    admission.NewObjectInterfacesFromScheme(scheme.Scheme),
			OptionalVariables:   vars,
			Namespace:           r.namespace,
		}, celconfig.RuntimeCELCostBudget)
		if err != nil {
			out.mutationErr = err
			return out
		}
		vattr.UpdateObject(got)
		out.obj = got
	}
	return out
}

// mutationCosts sets o.each: the own cost of each of c's expressions and
// of each variable they read on r (before any mutation), as the mutating
// plugin's evaluations see it (pass), and checks that they add up to what
// mutate counted.
func mutationCosts(t testing.TB, c *compiled, r request, o *outcome) {
	t.Helper()
	vattr, req := r.attributes()
	o.each = map[string]int64{}
	costs, total, errs := pass(c.vars, c.matchExprs, vattr, req, r, true)
	merge(o.each, costs)
	if len(errs) == 0 && total != o.matchCost {
		t.Errorf("match conditions: the expressions' own costs add up to %d, the API server's evaluation took %d", total, o.matchCost)
	}
	if !o.matched || o.matchErr != nil {
		return
	}
	var sum int64
	for _, m := range c.mutExprs {
		costs, total, more := pass(c.vars, []expression{m}, vattr, req, r, true)
		merge(o.each, costs)
		sum, errs = sum+total, append(errs, more...)
	}
	if len(errs) == 0 && sum != o.mutationCost {
		t.Errorf("mutations: the expressions' own costs add up to %d, the API server's evaluation took %d", sum, o.mutationCost)
	}
}

func (o outcome) String() string {
	s := spent{match: o.matchCost, call: o.mutationCost, each: o.each}
	return s.String()
}

// trimmed is msg up to its first line, clipped.
func trimmed(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	return clip(msg)
}
