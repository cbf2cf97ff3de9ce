//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
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
	for _, r := range cp.shard(ns, name).Refs {
		if r.Kind == "Node" {
			out = append(out, r.Name)
		}
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

// heldIn returns the identities node has entries for in namespace ns that
// last past beyond (running, or reserved until after it), and whether it
// still owns the shard each is in: what nothing but a change to the node's
// entries can remove before then.
func (cp *controlPlane) heldIn(node, ns string, beyond time.Time) map[string]bool {
	out := map[string]bool{}
	for _, s := range cp.shardsIn(ns) {
		lines, _ := s.Lines(node)
		for _, l := range lines {
			if l.Running() || l.Until.After(beyond) {
				out[ns+"/"+l.Identity] = s.OwnedBy(node)
			}
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

// claim writes l (its Seq the shard's current resourceVersion, as the
// publisher claims) beside the node's other entries in the shard, and
// returns the API server's answer.
func (w *indexWriter) claim(ns string, l placement.Line) error {
	name := placement.ShardOf(l.Identity)
	s, err := w.api.Get(context.Background(), ns, name)
	if err != nil {
		return err
	}
	lines, _ := s.Lines(w.node)
	lines = slices.DeleteFunc(lines, func(o placement.Line) bool { return o.Identity == l.Identity })
	l.Seq = s.ClaimSeq()
	return w.write(ns, name, entry.FormatValue(append(lines, l)))
}

// write makes value the node's in shard ns/name, as its publisher does.
func (w *indexWriter) write(ns, name, value string) error {
	_, err := w.api.Write(context.Background(), ns, name, placement.Change{Value: value, UID: w.uid})
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

// patches are the bodies of one change of a shard, one per write path:
// update (PUT, the object after), JSON merge patch, JSON patch, strategic
// merge patch and server-side apply (the object after, applied).
type patches struct {
	want                         *corev1.ConfigMap
	merge, jsonPatch, smp, apply []byte
}

// patchesOf computes the bodies that change cur into what mutate makes of
// it (any field of it): each patch is computed from the object before and
// after, so each path expresses exactly that change. An error when one
// cannot be built.
func patchesOf(cur *corev1.ConfigMap, mutate func(*corev1.ConfigMap)) (patches, error) {
	p := patches{want: cur.DeepCopy()}
	mutate(p.want)
	bare := func(cm *corev1.ConfigMap) ([]byte, error) { // what a client writes: no server-set fields
		x := cm.DeepCopy()
		x.ResourceVersion, x.ManagedFields, x.UID, x.CreationTimestamp, x.Generation = "", nil, "", metav1.Time{}, 0
		return json.Marshal(x)
	}
	from, err := bare(cur)
	if err != nil {
		return p, err
	}
	to, err := bare(p.want)
	if err != nil {
		return p, err
	}
	if p.merge, err = jsonpatch.CreateMergePatch(from, to); err != nil {
		return p, fmt.Errorf("merge patch: %w", err)
	}
	if p.smp, err = strategicpatch.CreateTwoWayMergePatch(from, to, corev1.ConfigMap{}); err != nil {
		return p, fmt.Errorf("strategic merge patch: %w", err)
	}
	ops := []map[string]any{}
	field := func(path string, had bool, v any, has bool) {
		switch {
		case has:
			ops = append(ops, map[string]any{"op": "add", "path": path, "value": v})
		case had:
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		}
	}
	want := p.want
	same := func(a, b any) bool { x, _ := json.Marshal(a); y, _ := json.Marshal(b); return string(x) == string(y) }
	changed := func(path string, had bool, old any, v any, has bool) {
		if had != has || !same(old, v) {
			field(path, had, v, has)
		}
	}
	changed("/metadata/labels", cur.Labels != nil, cur.Labels, want.Labels, want.Labels != nil)
	changed("/metadata/annotations", cur.Annotations != nil, cur.Annotations, want.Annotations, want.Annotations != nil)
	changed("/metadata/ownerReferences", cur.OwnerReferences != nil, cur.OwnerReferences, want.OwnerReferences, want.OwnerReferences != nil)
	changed("/metadata/finalizers", cur.Finalizers != nil, cur.Finalizers, want.Finalizers, want.Finalizers != nil)
	changed("/data", cur.Data != nil, cur.Data, want.Data, want.Data != nil)
	changed("/binaryData", cur.BinaryData != nil, cur.BinaryData, want.BinaryData, want.BinaryData != nil)
	changed("/immutable", cur.Immutable != nil, cur.Immutable, want.Immutable, want.Immutable != nil)
	if p.jsonPatch, err = json.Marshal(ops); err != nil {
		return p, fmt.Errorf("JSON patch: %w", err)
	}
	var applied map[string]any
	if err := json.Unmarshal(to, &applied); err != nil {
		return p, err
	}
	applied["apiVersion"], applied["kind"] = "v1", "ConfigMap"
	if p.apply, err = json.Marshal(applied); err != nil {
		return p, fmt.Errorf("apply configuration: %w", err)
	}
	return p, nil
}

// empty names what of p changes nothing: the change itself ("the
// mutation"), or a path's body (a patch of nothing: "{}", "[]"). Such a
// write is accepted and proves no refusal.
func (p patches) empty(cur *corev1.ConfigMap) []string {
	var out []string
	if wholeShard(cur) == wholeShard(p.want) {
		out = append(out, "the mutation")
	}
	for path, body := range map[string][]byte{"merge patch": p.merge, "JSON patch": p.jsonPatch, "strategic merge patch": p.smp} {
		if s := strings.TrimSpace(string(body)); s == "{}" || s == "[]" || s == "null" || s == "" {
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return out
}

// writes returns each path's write of p to cur's shard, as c (server-side
// apply forced, under its own field manager).
func (p patches) writes(c kubernetes.Interface, cur *corev1.ConfigMap) map[string]func() error {
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps(cur.Namespace)
	force := true
	patch := func(pt types.PatchType, body []byte, opts metav1.PatchOptions) func() error {
		return func() error { _, err := cms.Patch(ctx, cur.Name, pt, body, opts); return err }
	}
	return map[string]func() error{
		"update":                func() error { _, err := cms.Update(ctx, p.want, metav1.UpdateOptions{}); return err },
		"merge patch":           patch(types.MergePatchType, p.merge, metav1.PatchOptions{}),
		"JSON patch":            patch(types.JSONPatchType, p.jsonPatch, metav1.PatchOptions{}),
		"strategic merge patch": patch(types.StrategicMergePatchType, p.smp, metav1.PatchOptions{}),
		"server-side apply":     patch(types.ApplyPatchType, p.apply, metav1.PatchOptions{FieldManager: "attacker", Force: &force}),
	}
}

// writePaths are the ways a client can change an object (see patches),
// each expressing what mutate makes of cur. A body that cannot be built
// is a write that fails with that error, never one left out.
func writePaths(c kubernetes.Interface, cur *corev1.ConfigMap, mutate func(*corev1.ConfigMap)) map[string]func() error {
	p, err := patchesOf(cur, mutate)
	if err != nil {
		fail := func() error { return fmt.Errorf("building the write: %w", err) }
		return map[string]func() error{"update": fail, "merge patch": fail, "JSON patch": fail, "strategic merge patch": fail, "server-side apply": fail}
	}
	return p.writes(c, cur)
}

// refusedEverywhere tries mutate of shard ns/name with client c by every
// write path and fails the test unless the shard is the same after each,
// whole (but its resourceVersion and managedFields), and each write was
// refused by the index policy itself: where RBAC refuses first (a node's
// update: nodes may only patch), the refusal must be RBAC's, and the same
// change is made by the other paths. Only server-side apply may be
// accepted, changing nothing: under another field manager it cannot
// remove what it does not own. A write accepted on any other path fails
// the test even when the shard stayed the same, and so does a mutation
// that changes nothing or a path whose body would be empty (issue 50: an
// empty patch is accepted and passed as a refusal), or a body that cannot
// be built.
func (cp *controlPlane) refusedEverywhere(who string, c kubernetes.Interface, ns, name, what string, mutate func(*corev1.ConfigMap)) {
	t := cp.t
	t.Helper()
	ctx := context.Background()
	cur, err := cp.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	p, err := patchesOf(cur, mutate)
	if err != nil {
		t.Fatalf("%s: %s: building the writes: %v", who, what, err)
	}
	if e := p.empty(cur); len(e) > 0 {
		t.Fatalf("%s: %s: changes nothing (%s): a write of nothing is accepted and proves no refusal\nmerge patch %s\nJSON patch %s\nstrategic merge patch %s",
			who, what, strings.Join(e, ", "), p.merge, p.jsonPatch, p.smp)
	}
	node := strings.HasPrefix(who, "node")
	var noop []string
	for path, write := range p.writes(c, cur) {
		err := write()
		after, gerr := cp.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if gerr != nil || wholeShard(after) != wholeShard(cur) {
			t.Fatalf("%s: %s by %s: the shard changed (%v):\n%s\n→\n%s", who, what, path, err, wholeShard(cur), wholeShard(after))
		}
		switch {
		case err == nil && path == "server-side apply":
			noop = append(noop, path)
		case err == nil:
			t.Errorf("%s: %s by %s: accepted (the shard unchanged all the same), want refused", who, what, path)
		case node && path == "update":
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot update resource") {
				t.Errorf("%s: %s by %s: %v, want refused by RBAC (nodes may patch, not update)", who, what, path, err)
			}
		case !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'stickyip-placement-index'"):
			t.Errorf("%s: %s by %s: %v, want refused by the index policy", who, what, path, err)
		}
	}
	t.Logf("%s: %s: refused by the index policy on every path (update by RBAC for a node; server-side apply a no-op: %v); shard unchanged", who, what, noop)
}

// wholeShard is shard cm as it reads, but its resourceVersion and
// managedFields.
func wholeShard(cm *corev1.ConfigMap) string {
	c := cm.DeepCopy()
	c.ResourceVersion, c.ManagedFields = "", nil
	b, _ := json.Marshal(c)
	return string(b)
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
