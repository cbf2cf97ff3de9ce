// Package policycheck evaluates deploy/placement's admission policies with
// the API server's own code and CEL libraries (k8s.io/apiserver): every
// expression compiled as kube-apiserver compiles it, and every case of
// testdata/cases.json (written here from cases_test.go, with the contract's
// names and the largest inputs the API server and the controller let
// exist) run through the API server's matcher, compilers, patcher and
// validator, its cost checked against the API server's CEL limits. This
// module builds with Kubernetes 1.37's libraries; k136/ runs the same
// cases with 1.36's. The e2e tier runs the policies on a real API server.
package policycheck

import (
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/stickyip/stickyip/deploy"
)

// mutatingPolicy is the MutatingAdmissionPolicy name of deploy/placement.
func mutatingPolicy(t testing.TB, name string) *admissionv1.MutatingAdmissionPolicy {
	t.Helper()
	docs, err := deploy.PlacementObjects()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := docs["MutatingAdmissionPolicy/"+name].(*admissionv1.MutatingAdmissionPolicy)
	if !ok {
		t.Fatalf("deploy/placement has no MutatingAdmissionPolicy %s", name)
	}
	return p
}

// program compiles expr in the API server's CEL environment, with object,
// oldObject, params and request as dynamic values and variables as a map.
func program(t testing.TB, expr string) cel.Program {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	env, err = env.Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("params", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compile %q: %v", clip(expr), iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	return prg
}

// eval runs prg on vars and returns its value.
func eval(t testing.TB, prg cel.Program, vars map[string]any) any {
	t.Helper()
	out, _, err := prg.Eval(vars)
	if err != nil {
		t.Fatalf("eval with %v: %v", vars, err)
	}
	return out.Value()
}

// variable returns the expression of variable name of a policy's variables.
func variable(t testing.TB, vars []admissionv1.Variable, name string) string {
	t.Helper()
	for _, v := range vars {
		if v.Name == name {
			return v.Expression
		}
	}
	t.Fatalf("no variable %s", name)
	return ""
}
