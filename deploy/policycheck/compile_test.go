package policycheck

import (
	"testing"

	"github.com/google/cel-go/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// Every expression of deploy/placement compiles in the API server's CEL
// environment (a typo fails here, not only when the e2e tier applies it).
func TestEveryExpressionCompiles(t *testing.T) {
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("params", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("namespaceObject", cel.DynType), cel.Variable("authorizer", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	ps := load(t)
	n := 0
	compile := func(policy, what, expr string) {
		if expr == "" {
			return
		}
		n++
		if _, iss := env.Compile(expr); iss.Err() != nil {
			t.Errorf("%s, %s: %v", policy, what, iss.Err())
		}
	}
	for name, p := range ps.validating {
		for _, c := range p.Spec.MatchConditions {
			compile(name, "match condition "+c.Name, c.Expression)
		}
		for _, v := range p.Spec.Variables {
			compile(name, "variable "+v.Name, v.Expression)
		}
		for i, v := range p.Spec.Validations {
			compile(name, "validation", v.Expression)
			compile(name, "message", v.MessageExpression)
			_ = i
		}
	}
	for name, p := range ps.mutating {
		for _, c := range p.Spec.MatchConditions {
			compile(name, "match condition "+c.Name, c.Expression)
		}
		for _, v := range p.Spec.Variables {
			compile(name, "variable "+v.Name, v.Expression)
		}
	}
	if n < 50 {
		t.Errorf("compiled %d expressions: the policies were not read", n)
	}
}
