// Package policycheck evaluates deploy/placement's CEL with the API
// server's own CEL environment and libraries (k8s.io/apiserver) and
// compares it with what checkpointd computes in Go: the shard of an
// identity, the form of an index line, which lines the hint counts. The
// policies and checkpointd must agree to the character; the e2e tier runs
// them on a real API server, this runs them on every identity and line the
// tests and the fuzzer make up, in the unit tier.
package policycheck

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// policies are the admission policies of deploy/placement by kind/name.
type policies struct {
	validating map[string]*admissionv1.ValidatingAdmissionPolicy
	mutating   map[string]*admissionv1.MutatingAdmissionPolicy
}

func load(t testing.TB) policies {
	t.Helper()
	ps := policies{validating: map[string]*admissionv1.ValidatingAdmissionPolicy{}, mutating: map[string]*admissionv1.MutatingAdmissionPolicy{}}
	files, err := filepath.Glob("../placement/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("deploy/placement: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
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
				t.Fatalf("%s: %v", f, err)
			}
			var head struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if yaml.Unmarshal(doc, &head) != nil {
				continue
			}
			switch head.Kind {
			case "ValidatingAdmissionPolicy":
				p := &admissionv1.ValidatingAdmissionPolicy{}
				if err := yaml.UnmarshalStrict(doc, p); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				ps.validating[head.Metadata.Name] = p
			case "MutatingAdmissionPolicy":
				p := &admissionv1.MutatingAdmissionPolicy{}
				if err := yaml.UnmarshalStrict(doc, p); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				ps.mutating[head.Metadata.Name] = p
			}
		}
	}
	return ps
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

// validation returns the expression of the validation whose message
// contains msg.
func validation(t testing.TB, p *admissionv1.ValidatingAdmissionPolicy, msg string) string {
	t.Helper()
	for _, v := range p.Spec.Validations {
		if strings.Contains(v.MessageExpression, msg) || strings.Contains(v.Message, msg) {
			return v.Expression
		}
	}
	t.Fatalf("%s: no validation saying %q", p.Name, msg)
	return ""
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
