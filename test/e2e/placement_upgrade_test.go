//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// formerPublisher: the index as the checkpointd of issue 31 writes it,
// under deploy/placement as it is now (docs/placement.md, "Upgrading from
// the index of issue 31": the policies are upgraded first, then checkpointd).
// node2's old publisher claims identity:former for its pod own-b the old
// way (a strategic-merge patch of its key and reference on the
// resourceVersion it read, seq that resourceVersion, its own field manager
// stickyip/<node>); the hint counts that line; node2's new publisher then
// claims another identity in the same shard, and the old line is still
// there, the same, and still counts: nothing lost.
func (n *node) formerPublisher(node2 *indexWriter) {
	t := n.t
	ctx := context.Background()
	const ns, identity = "db", "identity:former"
	name := placement.ShardOf(identity)
	c2 := n.clientAs(n.tokens[nodeUser(node2Name)])
	cur, err := node2.api.Get(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	old := entryLine(identity, "own-b", "10.244.2.61")
	old.Seq, err = parseSeq(cur.RV)
	if err != nil && cur.RV != "" {
		t.Fatal(err)
	}
	lines, _ := cur.Lines(node2Name)
	lines = append(lines, old)
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": cur.RV,
			"labels":          map[string]string{placement.IndexLabel: strings.TrimPrefix(name, placement.ShardPrefix)},
			"ownerReferences": []map[string]any{{"apiVersion": "v1", "kind": "Node", "name": node2Name, "uid": node2.uid}},
		},
		"data": map[string]any{node2Name: entry.FormatValue(lines)},
	})
	if err != nil {
		t.Fatal(err)
	}
	formerManager := metav1.PatchOptions{FieldManager: "stickyip/" + node2Name}
	if cur.RV == "" { // no shard yet: the old publisher created it
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:          map[string]string{placement.IndexLabel: strings.TrimPrefix(name, placement.ShardPrefix)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node2Name, UID: node2.uid}}},
			Data: map[string]string{node2Name: entry.FormatValue(lines)}}
		_, err = c2.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: formerManager.FieldManager})
	} else {
		_, err = c2.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, formerManager)
	}
	if err != nil {
		t.Fatalf("node2's claim of %s as the checkpointd of issue 31 makes it: %v", identity, err)
	}
	written, ok := n.lineOf(ns, identity, node2Name)
	if !ok {
		t.Fatalf("node2's former claim of %s is not in the shard", identity)
	}
	hinted := func(what string) {
		pf, err := n.hintFor(unboundPod(ns, "", map[string]string{annReservation: "10", annIdentity: "former"}))
		if err != nil || len(pf) != 1 || len(pf[0].Preference.MatchFields) != 1 || !slices.Equal(pf[0].Preference.MatchFields[0].Values, []string{node2Name}) {
			t.Fatalf("%s: a pod of %s gets %+v (%v); want a preferred term for %s", what, identity, pf, err, node2Name)
		}
	}
	hinted("the former publisher's line")
	// The new publisher: another identity of the same shard, claimed for
	// own-b, beside the former line.
	var next string
	for i := 0; next == ""; i++ {
		if id := "identity:former" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); placement.ShardOf(id) == name {
			next = id
		}
	}
	if err := node2.claim(ns, entryLine(next, "own-b", "10.244.2.62")); err != nil {
		t.Fatalf("node2's new publisher claiming %s beside the former line: %v", next, err)
	}
	if after, ok := n.lineOf(ns, identity, node2Name); !ok || !after.Equal(written) {
		t.Fatalf("node2's former line of %s after its new publisher's write: %+v (%v); want %+v", identity, after, ok, written)
	}
	hinted("the former line after the new publisher's write")
	if _, ok := n.lineOf(ns, next, node2Name); !ok {
		t.Fatalf("node2's claim of %s is not in the shard", next)
	}
	t.Logf("the former publisher's claim of %s taken and counted; the new publisher writes beside it with nothing lost", identity)
}
