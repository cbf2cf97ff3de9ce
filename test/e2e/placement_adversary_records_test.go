//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// notOwn is the NodeRecord policy's refusal of user's write of record name.
func notOwn(user, name string) string {
	return user + " may write only its own NodeRecord (named after the node), not " + name
}

// noRefs is the NodeRecord policy's refusal of a node's references and
// finalizers.
const noRefs = "a node's NodeRecord carries no ownerReferences and no finalizers"

// recordChange is one change a writer makes to a record.
type recordChange struct {
	what   string
	mutate func(u *unstructured.Unstructured)
	// own: the same change of the writer's own record is taken (the
	// control that the body reaches the rule); false when the NodeRecord
	// policy refuses it there too (advOwnRecord), its control then being
	// the rule removed (advRuleRemoved).
	own bool
}

// recordChanges are the changes of a record's every field a node can
// write: its entries, its Node UID, labels, annotations, references to
// another Node or a made-up one, finalizers.
func (a *adversary) recordChanges() []recordChange {
	yes := true
	steal := recordEntry(advNS, "db0-1", a.evilPods[0], string(a.evilBase[0].PodUID), "10.244.9.9")
	steal.Since = metav1.NewTime(time.Now().Truncate(time.Second))
	return []recordChange{
		{"its entries: db0-1 for evil's pod", func(u *unstructured.Unstructured) { setEntry(u, steal) }, true},
		{"its entries removed", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "entries") }, true},
		{"its Node UID: a made-up one", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, string(advUID(7)), "spec", "nodeUID")
		}, true},
		{"its Node UID: another Node's", func(u *unstructured.Unstructured) {
			other := advVictims[1]
			if u.GetName() == other {
				other = advVictims[0]
			}
			_ = unstructured.SetNestedField(u.Object, string(a.uids[other]), "spec", "nodeUID")
		}, true},
		{"a label", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"adv.stickyip.io/x": "y"}) }, true},
		{"an annotation", func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"adv.stickyip.io/x": "y"}) }, true},
		{"an ownerReference to another Node, blocking its deletion", func(u *unstructured.Unstructured) {
			other := advVictims[1]
			if u.GetName() == other {
				other = advVictims[0]
			}
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: other, UID: a.uids[other], BlockOwnerDeletion: &yes}})
		}, false},
		{"an ownerReference with a made-up UID", func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "ghost", UID: advUID(8)}})
		}, false},
		{"a finalizer", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"example.com/keep"}) }, false},
	}
}

// setEntry replaces (or adds) the entry of e's namespace and identity in
// record u's spec.
func setEntry(u *unstructured.Unstructured, e placementv1.Entry) {
	entries, _, _ := unstructured.NestedSlice(u.Object, "spec", "entries")
	m, _ := runtimeToUnstructured(e)
	entries = slices.DeleteFunc(entries, func(x any) bool {
		o, _ := x.(map[string]any)
		return o["namespace"] == e.Namespace && o["identity"] == e.Identity
	})
	_ = unstructured.SetNestedSlice(u.Object, append(entries, m), "spec", "entries")
}

// advUID is a UUID made of n: a made-up UID a seed replays.
func advUID(n uint64) types.UID {
	return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(n>>32), n&0xffffffffffff))
}

// advRecords: evil, and a member of system:nodes that is no node, write
// victim-1's record on every path and field, create records of other
// names (generateName among them) and delete it: each refused by the
// NodeRecord policy, naming the writer and the record, victim-1's record
// unchanged; the same changes of evil's own record are taken on every path.
func (a *adversary) advRecords() {
	t := a.t
	ctx := context.Background()
	evil := a.quietClient(a.token(nodeUser(advEvil))).Resource(recordsGVR)
	intruder := a.quietClient(a.token(nodesGroupUser)).Resource(recordsGVR)
	victim := advVictims[0]
	before := a.cp.recordOf(victim)
	for _, c := range a.recordChanges() {
		refusedEverywhere(t, "evil", c.what+" of "+victim+"'s record", evil, a.admin, victim, c.mutate, notOwn(nodeUser(advEvil), victim))
		if c.own {
			a.acceptedEverywhere("evil", c.what+" of its own record", evil, c.mutate)
		}
	}
	refusedEverywhere(t, "evil", "delete "+victim+"'s record", evil, a.admin, victim, nil, notOwn(nodeUser(advEvil), victim))
	a.managedFields(evil, victim)
	for _, c := range a.recordChanges()[:5] {
		refusedEverywhere(t, nodesGroupUser, c.what+" of "+victim+"'s record", intruder, a.admin, victim, c.mutate, notOwn(nodesGroupUser, victim))
	}
	refusedEverywhere(t, nodesGroupUser, "delete "+victim+"'s record", intruder, a.admin, victim, nil, notOwn(nodesGroupUser, victim))

	// Creations under another name: victim-1's (it exists: the policy
	// answers before storage does), a made-up one, generated ones.
	create := func(who string, r dynamic.ResourceInterface, name, generate, want string) {
		t.Helper()
		obj := recordObject(name, string(a.uids[advEvil]), a.evilBase[0])
		obj.SetGenerateName(generate)
		_, err := r.Create(ctx, obj, metav1.CreateOptions{})
		requireRefused(t, fmt.Sprintf("%s creating a record named %q, generateName %q", who, name, generate), err, want)
	}
	create("evil", evil, victim, "", notOwn(nodeUser(advEvil), victim))
	create("evil", evil, "node-x", "", notOwn(nodeUser(advEvil), "node-x"))
	create("evil", evil, "", advEvil, notOwn(nodeUser(advEvil), advEvil))
	create("evil", evil, "", victim, notOwn(nodeUser(advEvil), victim))
	create("evil", evil, "", strings.Repeat("x", 253), notOwn(nodeUser(advEvil), "xxxxx"))
	create(nodesGroupUser, intruder, nodesGroupUser, "", notOwn(nodesGroupUser, nodesGroupUser))
	create(nodesGroupUser, intruder, "", nodesGroupUser, notOwn(nodesGroupUser, nodesGroupUser))
	// The control of a creation: evil's own record, deleted by evil and
	// created again by it.
	requireAccepted(t, "evil deleting its own record", evil.Delete(ctx, advEvil, metav1.DeleteOptions{}))
	_, err := evil.Create(ctx, recordObject(advEvil, string(a.uids[advEvil]), a.evilBase...), metav1.CreateOptions{})
	requireAccepted(t, "evil creating its own record", err)
	a.restoreEvil()
	if after := a.cp.recordOf(victim); fmt.Sprint(after.Spec) != fmt.Sprint(before.Spec) || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("%s's record after the refused writes: %+v (resourceVersion %s), want %+v (%s)", victim, after.Spec, after.ResourceVersion,
			before.Spec, before.ResourceVersion)
	}
}

// acceptedEverywhere makes change of who's own record (evil's) by every
// write path, each from the honest record, and fails the test unless each
// was taken and changed it.
func (a *adversary) acceptedEverywhere(who, what string, r dynamic.ResourceInterface, mutate func(*unstructured.Unstructured)) {
	t := a.t
	t.Helper()
	ctx := context.Background()
	probe := func() (*unstructured.Unstructured, *unstructured.Unstructured) {
		cur, err := a.admin.Get(ctx, advEvil, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := cur.DeepCopy()
		mutate(want)
		return cur, want
	}
	cur, want := probe()
	for _, path := range slices.Sorted(mapsKeys(writePaths(t, r, cur, want))) {
		cur, want := probe()
		if path == "server-side apply" && removes(cur, want) {
			// An apply configuration removes only what its manager applied
			// before: a removal of another manager's field is no apply.
			t.Logf("%s: %s: not a server-side apply (a removal of what another manager wrote)", who, what)
			continue
		}
		err := writePaths(t, r, cur, want)[path]()
		// The controller writes the record's status meanwhile, which
		// changes its resourceVersion: an update sent with the one read
		// before is refused as a conflict. The control tries again on a
		// fresh read; any other refusal fails it.
		for try := 0; apierrors.IsConflict(err) && try < 5; try++ {
			cur, want = probe()
			err = writePaths(t, r, cur, want)[path]()
		}
		after, gerr := a.admin.Get(ctx, advEvil, metav1.GetOptions{})
		if err != nil || gerr != nil || string(bare(after)) == string(bare(cur)) {
			t.Fatalf("%s: %s by %s (the control): %v, want taken and the record changed (%v)", who, what, path, err, gerr)
		}
		a.resetEvil()
	}
	a.restoreEvil()
	t.Logf("%s: %s (the control): taken on every path", who, what)
}

// removes reports whether want lacks a spec field cur has.
func removes(cur, want *unstructured.Unstructured) bool {
	a, _, _ := unstructured.NestedMap(cur.Object, "spec")
	b, _, _ := unstructured.NestedMap(want.Object, "spec")
	for k := range a {
		if _, ok := b[k]; !ok {
			return true
		}
	}
	return false
}

// managedFields: 900 KiB of managedFields on victim-1's record by every
// path that can carry them (server-side apply refuses managedFields in an
// apply configuration, whoever writes) refused, the record unchanged; on
// evil's own record taken, the record growing by them (its own object),
// and stripped again.
func (a *adversary) managedFields(evil dynamic.ResourceInterface, victim string) {
	t := a.t
	ctx := context.Background()
	bloat := bloatedFields(900 << 10)
	mf, _ := json.Marshal(bloat)
	paths := func(name string) map[string]func() error {
		return map[string]func() error{
			"update": func() error {
				cur, err := a.admin.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				u := cur.DeepCopy()
				u.SetManagedFields(bloat)
				_, err = evil.Update(ctx, u, metav1.UpdateOptions{})
				return err
			},
			"merge patch": func() error {
				_, err := evil.Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"managedFields":%s}}`, mf)), metav1.PatchOptions{})
				return err
			},
			"JSON patch": func() error {
				_, err := evil.Patch(ctx, name, types.JSONPatchType, []byte(fmt.Sprintf(`[{"op":"add","path":"/metadata/managedFields","value":%s}]`, mf)), metav1.PatchOptions{})
				return err
			},
		}
	}
	size := func(name string) int {
		u, err := a.admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(u.Object)
		return len(b)
	}
	size0 := size(victim)
	for _, path := range []string{"update", "merge patch", "JSON patch"} {
		requireRefused(t, "evil writing 900 KiB of managedFields into "+victim+"'s record by "+path, paths(victim)[path](), notOwn(nodeUser(advEvil), victim))
		if s := size(victim); s != size0 {
			t.Fatalf("%s's record went from %d to %d bytes", victim, size0, s)
		}
		own0 := size(advEvil)
		requireAccepted(t, "evil writing 900 KiB of managedFields into its own record by "+path, paths(advEvil)[path]())
		own := size(advEvil)
		if own < own0+800<<10 {
			t.Fatalf("evil's record %d bytes after its 900 KiB of managedFields (%d before): the write did not carry them", own, own0)
		}
		a.restoreEvil()
		t.Logf("evil's own record: %d bytes, %d with 900 KiB of managedFields, %d stripped again", own0, own, size(advEvil))
	}
}

// bloatedFields is a managedFields entry of about size bytes of made-up
// annotation keys, well formed: the API server takes such from a client
// as given.
func bloatedFields(size int) []metav1.ManagedFieldsEntry {
	keys := map[string]any{}
	for i := 0; len(keys)*30 < size; i++ {
		keys[fmt.Sprintf("f:made-up-key-%08d", i)] = map[string]any{}
	}
	raw, _ := json.Marshal(map[string]any{"f:metadata": map[string]any{"f:annotations": keys}})
	now := metav1.Now()
	return []metav1.ManagedFieldsEntry{{Manager: "stickyip-placement", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: placementv1.SchemeGroupVersion.String(), Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}
}

// advOwnRecord: evil's own record may carry no ownerReference (to another
// Node, blocking its deletion; to its own Node; with a made-up UID) and no
// finalizer, on any path; and nothing past the CRD's bounds (the schema
// refuses it, naming the field), the same at the bound taken.
func (a *adversary) advOwnRecord() {
	t := a.t
	evil := a.quietClient(a.token(nodeUser(advEvil))).Resource(recordsGVR)
	yes := true
	for _, c := range a.recordChanges() {
		if !c.own {
			refusedEverywhere(t, "evil", c.what+" of its own record", evil, a.admin, advEvil, c.mutate, noRefs)
		}
	}
	refusedEverywhere(t, "evil", "an ownerReference to its own Node on its own record", evil, a.admin, advEvil, func(u *unstructured.Unstructured) {
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: advEvil, UID: a.uids[advEvil], Controller: &yes}})
	}, noRefs)
	a.bounds(evil)
}

// bounds: each of the CRD's bounds on a record, one past it refused by the
// schema (the message names the field), at it taken.
func (a *adversary) bounds(evil dynamic.ResourceInterface) {
	t := a.t
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("a", n) }
	entry := func(i int) placementv1.Entry {
		return recordEntry(advNS, fmt.Sprintf("b-%d", i), fmt.Sprintf("b-%d", i), "00000000-0000-4000-8000-000000000001", "10.244.9.1")
	}
	write := func(entries []placementv1.Entry, uid string) error {
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeUID": uid, "entries": entries}})
		_, err := evil.Patch(ctx, advEvil, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	many := func(n int) []placementv1.Entry {
		out := make([]placementv1.Entry, n)
		for i := range out {
			out[i] = entry(i)
		}
		return out
	}
	with := func(f func(*placementv1.Entry)) []placementv1.Entry {
		e := entry(0)
		f(&e)
		return []placementv1.Entry{e}
	}
	uid := string(a.uids[advEvil])
	for _, c := range []struct {
		what          string
		over, at      []placementv1.Entry
		overUID, atID string
		want          string
	}{
		{"entries", many(placementv1.MaxEntries + 1), many(placementv1.MaxEntries), uid, uid, fmt.Sprintf("spec.entries: Too many: %d: must have at most %d items", placementv1.MaxEntries+1, placementv1.MaxEntries)},
		{"an identity", with(func(e *placementv1.Entry) { e.Identity = "identity:" + long(254) }),
			with(func(e *placementv1.Entry) { e.Identity = "identity:" + long(253) }), uid, uid, "spec.entries[0].identity: Too long"},
		{"a pod's name", with(func(e *placementv1.Entry) { e.Pod = long(254) }), with(func(e *placementv1.Entry) { e.Pod = long(253) }), uid, uid,
			"spec.entries[0].pod: Too long"},
		{"an identity of another form", with(func(e *placementv1.Entry) { e.Identity = "identity:DB-0" }),
			with(func(e *placementv1.Entry) { e.Identity = "identity:db-0" }), uid, uid, "spec.entries[0].identity in body should match"},
		{"a namespace", with(func(e *placementv1.Entry) { e.Namespace = long(64) }), with(func(e *placementv1.Entry) { e.Namespace = long(63) }), uid, uid,
			"spec.entries[0].namespace: Too long"},
		{"a pod UID", with(func(e *placementv1.Entry) { e.PodUID = types.UID(long(37)) }), with(func(e *placementv1.Entry) { e.PodUID = types.UID(long(36)) }),
			uid, uid, "spec.entries[0].podUID: Too long"},
		{"addresses", with(func(e *placementv1.Entry) { e.Addresses = addresses(9) }), with(func(e *placementv1.Entry) { e.Addresses = addresses(8) }), uid, uid,
			"spec.entries[0].addresses: Too many: 9: must have at most 8 items"},
		{"an address", with(func(e *placementv1.Entry) { e.Addresses = []string{long(46)} }), with(func(e *placementv1.Entry) { e.Addresses = []string{long(45)} }),
			uid, uid, "spec.entries[0].addresses[0]: Too long"},
		{"the Node UID", many(1), many(1), long(37), uid, "spec.nodeUID: Too long"},
	} {
		err := write(c.over, c.overUID)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("evil's record with %s past the CRD's bound: %v, want refused by the schema with %q", c.what, err, c.want)
		} else {
			t.Logf("evil's record with %s past the CRD's bound: refused (%s)", c.what, c.want)
		}
		requireAccepted(t, "evil's record with "+c.what+" at the CRD's bound", write(c.at, c.atID))
	}
	a.restoreEvil()
}

// addresses are n IPv6 addresses of the longest canonical form.
func addresses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%x", 0xfff0+i)
	}
	return out
}

// advRuleRemoved: the controls of the refusals no write of the writer's own
// object shows, the same writes with stickyip-node-records' binding
// removed (the probe's dry-run creation taken: out of effect), each taken;
// then the binding back (the probe refused again) and what they wrote
// removed.
func (a *adversary) advRuleRemoved() {
	t := a.t
	ctx := context.Background()
	vbs := a.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	binding, err := vbs.Get(ctx, "stickyip-node-records", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := vbs.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		b := binding.DeepCopy()
		b.ResourceVersion, b.UID, b.CreationTimestamp, b.ManagedFields = "", "", metav1.Time{}, nil
		if _, err := vbs.Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		a.cp.waitRecordsPolicy()
	}
	t.Cleanup(restore)
	eventually(t, "stickyip-node-records out of effect (the probe's dry-run creation taken)", time.Minute, 100*time.Millisecond, func() (bool, string) {
		_, err := a.admin.Create(ctx, recordObject(placementv1.ProbeName, "00000000-0000-0000-0000-000000000000"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprint(err)
	})
	evil := a.quietClient(a.token(nodeUser(advEvil))).Resource(recordsGVR)
	intruder := a.quietClient(a.token(nodesGroupUser)).Resource(recordsGVR)
	victim := advVictims[0]
	var made []string
	creates := []struct {
		who      string
		r        dynamic.ResourceInterface
		name, gn string
	}{{"evil", evil, "node-x", ""}, {"evil", evil, "", advEvil}, {nodesGroupUser, intruder, nodesGroupUser, ""}, {nodesGroupUser, intruder, "", nodesGroupUser}}
	for _, c := range creates {
		obj := recordObject(c.name, string(a.uids[advEvil]))
		obj.SetGenerateName(c.gn)
		got, err := c.r.Create(ctx, obj, metav1.CreateOptions{})
		requireAccepted(t, fmt.Sprintf("%s creating a record named %q, generateName %q, without the rule", c.who, c.name, c.gn), err)
		if err == nil {
			made = append(made, got.GetName())
		}
	}
	_, err = evil.Patch(ctx, victim, types.MergePatchType, []byte(`{"metadata":{"labels":{"adv.stickyip.io/x":"y"}}}`), metav1.PatchOptions{})
	requireAccepted(t, "evil labelling "+victim+"'s record without the rule", err)
	_, err = intruder.Patch(ctx, victim, types.MergePatchType, []byte(`{"metadata":{"labels":{"adv.stickyip.io/x":"z"}}}`), metav1.PatchOptions{})
	requireAccepted(t, nodesGroupUser+" labelling "+victim+"'s record without the rule", err)
	for _, c := range a.recordChanges() {
		if c.own {
			continue
		}
		// A made-up owner is dangling: the garbage collector deletes the
		// record that carries it, so it goes on the record made above,
		// not on evil's.
		name := advEvil
		if strings.Contains(c.what, "made-up") {
			name = "node-x"
		}
		cur, err := a.admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := cur.DeepCopy()
		c.mutate(want)
		requireAccepted(t, fmt.Sprintf("evil: %s of record %s without the rule, by merge patch", c.what, name), writePaths(t, evil, cur, want)["merge patch"]())
		if name == advEvil {
			a.restoreEvil()
		}
	}
	restore()
	for _, name := range made {
		if err := a.admin.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if _, err := a.admin.Patch(ctx, victim, types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Logf("without stickyip-node-records: %d records of other names created (%v), %s's record labelled by evil and %s, evil's own references and finalizers taken; the rule back in effect, those removed",
		len(made), made, victim, nodesGroupUser)
}
