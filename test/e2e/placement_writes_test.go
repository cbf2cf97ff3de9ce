//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// The ways a client may write an object, each expressing one change.

// writePaths returns each path's write that makes cur what want is, as r:
// update (cur's resourceVersion), JSON merge patch, JSON patch, server-side
// apply (forced, under its own field manager); with want nil, delete. A
// body that cannot be built fails the test; so does a change of nothing
// (a write of nothing is accepted, and proves no refusal).
func writePaths(t testing.TB, r dynamic.ResourceInterface, cur, want *unstructured.Unstructured) map[string]func() error {
	t.Helper()
	ctx := context.Background()
	name := cur.GetName()
	if want == nil {
		return map[string]func() error{"delete": func() error { return r.Delete(ctx, name, metav1.DeleteOptions{}) }}
	}
	from, to := bare(cur), bare(want)
	if string(from) == string(to) {
		t.Fatalf("the change of %s changes nothing: a write of it proves no refusal", name)
	}
	merge, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		t.Fatalf("merge patch of %s: %v", name, err)
	}
	ops := jsonPatchOps(t, from, to)
	force := true
	patch := func(pt types.PatchType, body []byte, opts metav1.PatchOptions) func() error {
		return func() error { _, err := r.Patch(ctx, name, pt, body, opts); return err }
	}
	return map[string]func() error{
		"update": func() error {
			u := want.DeepCopy()
			u.SetResourceVersion(cur.GetResourceVersion())
			_, err := r.Update(ctx, u, metav1.UpdateOptions{})
			return err
		},
		"merge patch":       patch(types.MergePatchType, merge, metav1.PatchOptions{}),
		"JSON patch":        patch(types.JSONPatchType, ops, metav1.PatchOptions{}),
		"server-side apply": patch(types.ApplyPatchType, to, metav1.PatchOptions{FieldManager: "attacker", Force: &force}),
	}
}

// bare is what a client writes of u: no field the server sets.
func bare(u *unstructured.Unstructured) []byte {
	c := u.DeepCopy()
	for _, f := range []string{"resourceVersion", "managedFields", "uid", "creationTimestamp", "generation"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(c.Object, "status")
	b, _ := json.Marshal(c.Object)
	return b
}

// jsonPatchOps is a JSON patch that makes from to: an add (or replace) or a
// remove for each top-level field and each metadata field that differs.
func jsonPatchOps(t testing.TB, from, to []byte) []byte {
	t.Helper()
	var a, b map[string]any
	if json.Unmarshal(from, &a) != nil || json.Unmarshal(to, &b) != nil {
		t.Fatal("JSON patch: the objects do not decode")
	}
	var ops []map[string]any
	diff := func(prefix string, x, y map[string]any) {
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			if prefix == "" && k == "metadata" {
				continue
			}
			xv, had := x[k]
			yv, has := y[k]
			xs, _ := json.Marshal(xv)
			ys, _ := json.Marshal(yv)
			switch {
			case has && (!had || string(xs) != string(ys)):
				ops = append(ops, map[string]any{"op": "add", "path": prefix + "/" + k, "value": yv})
			case had && !has:
				ops = append(ops, map[string]any{"op": "remove", "path": prefix + "/" + k})
			}
		}
	}
	am, _ := a["metadata"].(map[string]any)
	bm, _ := b["metadata"].(map[string]any)
	diff("/metadata", am, bm)
	diff("", a, b)
	out, _ := json.Marshal(ops)
	return out
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// refusedEverywhere tries what mutate makes of object name by every write
// path, as r (someone's credentials), and fails the test unless each was
// refused with a message holding want and the object, as admin reads it,
// is the same after each (but its resourceVersion). mutate nil tries the
// deletion.
func refusedEverywhere(t testing.TB, who, what string, r, admin dynamic.ResourceInterface, name string, mutate func(*unstructured.Unstructured), want string) {
	t.Helper()
	ctx := context.Background()
	cur, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %s: read %s: %v", who, what, name, err)
	}
	var target *unstructured.Unstructured
	if mutate != nil {
		target = cur.DeepCopy()
		mutate(target)
	}
	for path, write := range writePaths(t, r, cur, target) {
		err := write()
		after, gerr := admin.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil || string(bare(after)) != string(bare(cur)) {
			t.Fatalf("%s: %s by %s: the object changed (%v):\n%s\n→\n%s", who, what, path, err, bare(cur), bare(after))
		}
		if !refused(err, want) {
			t.Errorf("%s: %s by %s: %v, want refused with %q", who, what, path, err, want)
		}
	}
	t.Logf("%s: %s: refused on every path (%s); the object unchanged", who, what, want)
}

// refused reports whether err is the API server's refusal (forbidden or
// invalid) and its message holds want (never empty: a test must name what
// refused it).
func refused(err error, want string) bool {
	return err != nil && want != "" && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), want)
}

// requireRefused fails the test unless err is a refusal whose message
// holds want.
func requireRefused(t testing.TB, what string, err error, want string) {
	t.Helper()
	if !refused(err, want) {
		t.Errorf("%s: %v, want refused with %q", what, err, want)
		return
	}
	t.Logf("%s: refused (%s)", what, want)
}

// requireAccepted fails the test when err is not nil: the control that
// shows a refused write's body reaches the rule under test.
func requireAccepted(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s (the control): %v, want accepted", what, err)
	}
	t.Logf("%s (the control): accepted", what)
}

// rbacRefusal is in the API server's refusal of a request RBAC does not
// grant.
func rbacRefusal(verb, resource string) string {
	return fmt.Sprintf("cannot %s resource %q", verb, resource)
}

// indexWriterRefusal is in stickyip-index-writer's refusal of a shard's
// write (ConfigMap name) by anyone but the controller.
func indexWriterRefusal(name string) string {
	return "ConfigMap " + name + ": the placement index (a shard's name or the " + placementv1.IndexLabel + " label) is written by stickyip-controller alone"
}

// shardPatch is the first shard of identity's series and a JSON merge
// patch of it pointing identity at node.
func shardPatch(identity, node string) (name string, patch []byte) {
	series, key := placementv1.ShardKey(identity)
	return placementv1.ShardName(series, 0), []byte(`{"data":{"` + key + `":"` + node + `"}}`)
}
