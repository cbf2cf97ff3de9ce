//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// The placement index as the tests read and attack it: every read is the
// administrator's, every write is made with the credentials the test names.

// shardsIn returns the placement index shards of namespace ns ("": every
// namespace) by namespace/name, as admin.
func (cp *controlPlane) shardsIn(ns string) map[string]*placement.Shard {
	t := cp.t
	t.Helper()
	l, err := cp.client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: placement.IndexLabel})
	if err != nil {
		t.Fatalf("list the placement index: %v", err)
	}
	out := map[string]*placement.Shard{}
	for i := range l.Items {
		out[l.Items[i].Namespace+"/"+l.Items[i].Name] = placement.DecodeShard(&l.Items[i])
	}
	return out
}

// shard returns shard ns/name as admin reads it (Exists false: none).
func (cp *controlPlane) shard(ns, name string) *placement.Shard {
	if s := cp.shardsIn(ns)[ns+"/"+name]; s != nil {
		return s
	}
	return &placement.Shard{Values: map[string]string{}}
}

// lineOf is node's entry for identity in namespace ns's index.
func (cp *controlPlane) lineOf(ns, identity, node string) (placement.Line, bool) {
	lines, _ := cp.shard(ns, placement.ShardOf(identity)).Lines(node)
	i := slices.IndexFunc(lines, func(l placement.Line) bool { return l.Identity == identity })
	if i < 0 {
		return placement.Line{}, false
	}
	return lines[i], true
}

// hinted names the node deploy/placement's hint picks for identity in ns,
// read from the index as the policy reads it: of the nodes that own the
// identity's shard and list it, the one with the latest claim (largest
// seq); "" when none.
func (cp *controlPlane) hinted(ns, identity string) string {
	s := cp.shard(ns, placement.ShardOf(identity))
	best, seq := "", uint64(0)
	for n := range s.Values {
		if !s.OwnedBy(n) {
			continue
		}
		lines, _ := s.Lines(n)
		for _, l := range lines {
			if l.Identity == identity && (best == "" || l.Seq > seq) {
				best, seq = n, l.Seq
			}
		}
	}
	return best
}

// ownersOf names the Nodes that own shard ns/name.
func (cp *controlPlane) ownersOf(ns, name string) []string {
	var out []string
	for _, o := range cp.shard(ns, name).Owners {
		out = append(out, o.Name)
	}
	slices.Sort(out)
	return out
}

// heldBy returns the identities (namespace/identity) node has entries for in
// every namespace, and whether it still owns the shard each is in.
func (cp *controlPlane) heldBy(node string) map[string]bool {
	out := map[string]bool{}
	for key, s := range cp.shardsIn("") {
		ns, _, _ := strings.Cut(key, "/")
		lines, _ := s.Lines(node)
		for _, l := range lines {
			out[ns+"/"+l.Identity] = s.OwnedBy(node)
		}
	}
	return out
}

// adminDeleteShard deletes shard ns/name as admin (gone already is fine).
func (cp *controlPlane) adminDeleteShard(ns, name string) {
	err := cp.client.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		cp.t.Fatal(err)
	}
}

// indexWriter writes a node's entries as its publisher does, with the
// node's credentials (placement.API).
type indexWriter struct {
	cp   *controlPlane
	node string
	api  placement.API
	uid  types.UID
}

// indexWriterFor returns node's writer.
func (cp *controlPlane) indexWriterFor(node string) *indexWriter {
	cp.t.Helper()
	c, err := apiclient.New(cp.apiClientConfig(cp.tokens[nodeUser(node)]))
	if err != nil {
		cp.t.Fatal(err)
	}
	api := placement.NewAPI(c, node)
	uid, err := api.NodeUID(context.Background())
	if err != nil {
		cp.t.Fatalf("read Node %s as itself: %v", node, err)
	}
	return &indexWriter{cp: cp, node: node, api: api, uid: uid}
}

// claim writes l (its Seq the shard's current resourceVersion) beside the
// node's other entries in the shard, and returns the API server's answer.
func (w *indexWriter) claim(ns string, l placement.Line) error {
	name := placement.ShardOf(l.Identity)
	s, err := w.api.Get(context.Background(), ns, name)
	if err != nil {
		return err
	}
	lines, _ := s.Lines(w.node)
	lines = slices.DeleteFunc(lines, func(o placement.Line) bool { return o.Identity == l.Identity })
	rv := s.RV
	if !s.Exists {
		rv = ""
	}
	l.Seq, _ = parseSeq(s.RV)
	_, err = w.api.Write(context.Background(), ns, name, rv, w.uid, nil, entry.FormatValue(append(lines, l)))
	return err
}

func parseSeq(rv string) (uint64, error) {
	var n uint64
	_, err := fmt.Sscan(rv, &n)
	return n, err
}

// entryLine is an entry of identity for pod since now, on one address.
func entryLine(identity, pod, ip string) placement.Line {
	return placement.Line{Identity: identity, Pod: pod, Since: time.Now().UTC().Truncate(time.Millisecond), IPs: []string{ip}}
}

// writePaths are the ways a client can change an object: update (PUT),
// JSON merge patch, JSON patch, strategic merge patch and server-side apply
// (forced). mutate says what the writer wants the shard to become; each path
// expresses exactly that change. It returns each path's write.
func writePaths(c kubernetes.Interface, cur *corev1.ConfigMap, mutate func(*corev1.ConfigMap)) map[string]func() error {
	ctx := context.Background()
	want := cur.DeepCopy()
	mutate(want)
	cms := c.CoreV1().ConfigMaps(cur.Namespace)
	dataDiff := map[string]any{}
	for k, v := range want.Data {
		if cur.Data[k] != v {
			dataDiff[k] = v
		}
	}
	for k := range cur.Data {
		if _, ok := want.Data[k]; !ok {
			dataDiff[k] = nil
		}
	}
	meta := map[string]any{}
	if fmt.Sprint(want.OwnerReferences) != fmt.Sprint(cur.OwnerReferences) {
		meta["ownerReferences"] = want.OwnerReferences
	}
	if fmt.Sprint(want.Labels) != fmt.Sprint(cur.Labels) {
		meta["labels"] = want.Labels
	}
	merge, _ := json.Marshal(map[string]any{"metadata": meta, "data": dataDiff})
	ops := []map[string]any{{"op": "replace", "path": "/data", "value": want.Data}}
	if want.OwnerReferences != nil || cur.OwnerReferences != nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/ownerReferences", "value": want.OwnerReferences})
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels", "value": want.Labels})
	jp, _ := json.Marshal(ops)
	smpMeta := map[string]any{}
	if _, ok := meta["labels"]; ok {
		smpMeta["labels"] = want.Labels
	}
	var refs []any
	for _, r := range want.OwnerReferences {
		refs = append(refs, r)
	}
	for _, r := range cur.OwnerReferences {
		if !slices.ContainsFunc(want.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == r.UID }) {
			refs = append(refs, map[string]any{"$patch": "delete", "uid": r.UID})
		}
	}
	if refs != nil {
		smpMeta["ownerReferences"] = refs
	}
	smp, _ := json.Marshal(map[string]any{"metadata": smpMeta, "data": dataDiff})
	apply, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": cur.Name, "namespace": cur.Namespace, "labels": want.Labels, "ownerReferences": want.OwnerReferences},
		"data":     want.Data})
	force := true
	patch := func(pt types.PatchType, body []byte, opts metav1.PatchOptions) func() error {
		return func() error { _, err := cms.Patch(ctx, cur.Name, pt, body, opts); return err }
	}
	return map[string]func() error{
		"update":                func() error { _, err := cms.Update(ctx, want, metav1.UpdateOptions{}); return err },
		"merge patch":           patch(types.MergePatchType, merge, metav1.PatchOptions{}),
		"JSON patch":            patch(types.JSONPatchType, jp, metav1.PatchOptions{}),
		"strategic merge patch": patch(types.StrategicMergePatchType, smp, metav1.PatchOptions{}),
		"server-side apply":     patch(types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "attacker", Force: &force}),
	}
}

// refusedEverywhere tries mutate of shard ns/name with client c by every
// write path and fails the test unless the shard is unchanged (data,
// owners, labels) after each, and each write was refused or changed nothing
// (server-side apply under another field manager cannot remove what it
// does not own: it is a no-op, not a refusal).
func (cp *controlPlane) refusedEverywhere(who string, c kubernetes.Interface, ns, name, what string, mutate func(*corev1.ConfigMap)) {
	t := cp.t
	t.Helper()
	ctx := context.Background()
	cur, err := cp.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var noop []string
	for path, write := range writePaths(c, cur, mutate) {
		err := write()
		after, gerr := cp.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil || !maps.Equal(after.Data, cur.Data) || fmt.Sprint(after.OwnerReferences) != fmt.Sprint(cur.OwnerReferences) ||
			!maps.Equal(after.Labels, cur.Labels) {
			t.Fatalf("%s: %s by %s: the shard changed (%v): %v → %v, owners %v → %v", who, what, path, err, cur.Data, after.Data,
				cur.OwnerReferences, after.OwnerReferences)
		}
		switch {
		case err == nil:
			noop = append(noop, path)
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: %s by %s: %v, want refused (Forbidden or Invalid)", who, what, path, err)
		}
	}
	slices.Sort(noop)
	t.Logf("%s: %s: refused by update, merge, JSON and strategic merge patch and server-side apply (no-op, nothing stored: %v); shard unchanged", who, what, noop)
}

// requireRefused fails the test unless err is a refusal whose message holds
// want.
func requireRefused(t testing.TB, what string, err error, want string) {
	t.Helper()
	if err == nil || !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want refused with %q", what, err, want)
		return
	}
	t.Logf("%s: refused (%s)", what, want)
}
