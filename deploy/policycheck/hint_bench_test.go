package policycheck

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
)

// BenchmarkHintLookup evaluates the hint's lookup — its variables, in
// order, up to the node it names — with the API server's CEL environment,
// for a held pod-name identity in a shard as full as 30,000 identities in a
// namespace make one (3,750 lines over 100 nodes, each owning the shard).
// It is the CEL part of what a sticky pod's creation pays, free of the
// noise a whole API server's timing carries (make bench-placement measures
// that); run it on two versions of placement-policy.yaml to compare them.
func BenchmarkHintLookup(b *testing.B) {
	hint := load(b).mutating["stickyip-placement"]
	const nodes, lines = 100, 3750
	data := map[string]any{}
	var refs []any
	values := make([]string, nodes)
	for i := range lines {
		id := fmt.Sprintf("app-%d", i)
		n := i % nodes
		if values[n] != "" {
			values[n] += "\n"
		}
		values[n] += fmt.Sprintf("%s %s %d 2026-11-27T10:00:00.000Z - 10.244.%d.%d", id, id, 1000+i, n, 2+i/nodes)
	}
	for n, v := range values {
		name := fmt.Sprintf("node-%d", n)
		data[name] = v
		refs = append(refs, map[string]any{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "uid-" + name})
	}
	params := map[string]any{
		"metadata": map[string]any{"name": "stickyip-index-0", "resourceVersion": strconv.Itoa(1000 + lines), "ownerReferences": refs},
		"data":     data,
	}
	const held = "app-1234"
	object := map[string]any{
		"metadata": map[string]any{"name": held, "annotations": map[string]any{"io.kubernetes.cri/reserved-ip-duration": "600"}},
		"spec":     map[string]any{},
	}
	type variable struct {
		name string
		prg  cel.Program
	}
	var vars []variable
	for _, v := range hint.Spec.Variables {
		vars = append(vars, variable{v.Name, program(b, v.Expression)})
		if v.Name == "node" {
			break
		}
	}
	lookup := func() ref.Val {
		got := map[string]any{}
		var out ref.Val
		for _, v := range vars {
			var err error
			out, _, err = v.prg.Eval(map[string]any{"object": object, "params": params, "variables": got})
			if err != nil {
				b.Fatalf("variable %s: %v", v.name, err)
			}
			got[v.name] = out
		}
		return out
	}
	if want := fmt.Sprintf("node-%d", 1234%nodes); lookup().Value() != want {
		b.Fatalf("the hint names %v for %s; want %s", lookup().Value(), held, want)
	}
	for b.Loop() {
		lookup()
	}
}
