//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/reservation"
)

// advLatency bounds how long an honest node's claim, update or release
// may take to land while the adversary writes (issue 47: "within 5 s").
const advLatency = 5 * time.Second

// The findings of issue 47, each a regression case of TestPlacementAdversary
// (each fails on the tree before issue 47: the stickyip-placement-index
// that refused the collector, the publisher's merge-patch cleanup, the
// stale claim that failed a whole write, managedFields taken as given).
var advRegressions47 = []advRegression{
	// 1. A copied UID kept every removed node counting in its shard: the
	// collector's one patch, removing every dangling reference, was refused.
	{"a copied UID, then a third node deleted", func(a *adversary) {
		s, _ := a.victimShard()
		a.spawn(advNS, advGone[0], s)
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advVictims[0]], 0) }, allPaths[1:]))
		a.deleteNode(advNS, advGone[0], metav1.DeletePropagationBackground)
	}},
	// ... and the node whose UID was copied, retired with --cascade=orphan:
	// the collector's orphaning patch removes every reference with its UID.
	{"a copied UID, then that node deleted with --cascade=orphan", func(a *adversary) {
		s, _ := a.victimShard()
		a.spawn(advNS, advGone[1], s)
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advGone[1]], -1) }, allPaths[1:]))
		a.deleteNode(advNS, advGone[1], metav1.DeletePropagationOrphan)
	}},
	// ... and a node preparing its own removal: its entries outlived its
	// Node.
	{"a node's copy of another's UID, then its own Node deleted", func(a *adversary) {
		s, _ := a.victimShard()
		w := a.spawn(advNS, advGone[2], s)
		c := a.cp.clientAs(a.cp.tokens[nodeUser(advGone[2])])
		a.refuse(a.write(c, s, func(cm *corev1.ConfigMap) {
			i := slices.IndexFunc(cm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == w.node })
			cm.OwnerReferences[i].UID = a.uids[advVictims[0]]
		}, allPaths[1:]))
		a.deleteNode(advNS, advGone[2], metav1.DeletePropagationBackground)
	}},
	// The order of arrival: evil's reference carries victim-1's UID before
	// victim-1 ever wrote to the shard (the policy cannot tell a UID is
	// made up), and evil puts it back as fast as the API server answers,
	// and writes made-up UIDs to push the collector's record of it out.
	// victim-1's first claim there lands within advLatency, and evil's
	// reference never shares its UID.
	{"a copied UID before the node's first write, put back as fast as the collector removes it", func(a *adversary) {
		ctx := context.Background()
		ns, victim := advFirstNS, advVictims[0]
		pod := podInShard("first", placement.ShardOf("first-0"))
		shard := placement.ShardOf(pod)
		evilPod := a.evilIn[ns][shard]
		squat := func(uid types.UID, n int) error {
			l := entryLine(evilPod, evilPod, "10.244.9.7")
			l.Since, l.Seq = advT0.Add(time.Duration(n)*time.Millisecond), 0
			return a.evilPatch(ns, shard, map[string]any{
				"metadata": map[string]any{"labels": map[string]string{placement.IndexLabel: shard[len(placement.ShardPrefix):]},
					"ownerReferences": []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: advEvil, UID: uid}}},
				"data": map[string]string{advEvil: l.String()}})
		}
		from := time.Now()
		if err := squat(a.uids[victim], 0); err != nil {
			a.t.Fatalf("evil's reference with %s's UID in %s/%s, before %s wrote there: %v", victim, ns, shard, victim, err)
		}
		a.accepted = append(a.accepted, fmt.Sprintf("%s/%s: evil's reference with %s's UID before its first write", ns, shard, victim))
		took := a.collected(ns, shard, from, "evil's reference with "+victim+"'s UID", a.uids[victim])
		if cur, err := a.cp.client.CoreV1().ConfigMaps(ns).Get(ctx, shard, metav1.GetOptions{}); err != nil || cur.Data[advEvil] != "" ||
			!strings.Contains(cur.Annotations["stickyip.io/collected"], advEvil+" "+string(a.uids[victim])) {
			a.t.Fatalf("the collector removed evil's reference: the shard %s (%v)", jsonOf(cur), err)
		}
		// Recorded by the collector: evil cannot put it back.
		stop := hammer(4, func(n int) error { return squat(a.uids[victim], n) })
		time.Sleep(time.Second)
		if tried, took := stop(); took != 0 {
			a.t.Errorf("evil put its reference with %s's UID back %d times of %d after the collector removed it", victim, took, tried)
		} else {
			a.t.Logf("evil tried to put its reference with %s's UID back %d times in a second: refused each time", victim, tried)
		}
		// ... unless it pushes the record out (32 references of made-up
		// UIDs, each removed by the collector first): victim-1 writes
		// meanwhile.
		stop = hammer(4, func(n int) error {
			if squat(a.uids[victim], n) == nil {
				return nil
			}
			return squat(advUID(uint64(n)+1000), n)
		})
		p := testPod(pod, nil)
		p.Namespace, p.Spec.NodeName = ns, victim
		if _, err := a.cp.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			a.t.Fatal(err)
		}
		a.stores[victim].add(advEntryIn(ns, pod, pod, "10.244.1.40", time.Now().UTC().Truncate(time.Millisecond), time.Time{}))
		landed := a.within(victim+"'s first claim in "+ns+"/"+shard, func() (bool, string) {
			s := a.cp.shard(ns, shard)
			lines, _ := s.Lines(victim)
			ok := slices.ContainsFunc(lines, func(l placement.Line) bool { return l.Identity == pod }) &&
				slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool { return r.Name == victim && r.UID == a.uids[victim] })
			return ok, fmt.Sprintf("refs %v", s.Refs)
		})
		tried, took2 := stop()
		a.t.Logf("evil's reference with %s's UID removed by the collector %v after it was written; evil then wrote %d times (%d taken: made-up UIDs), "+
			"%s's first claim landed after %v", victim, took.Round(time.Millisecond), tried, took2, victim, landed.Round(time.Millisecond))
		if landed > advLatency {
			a.t.Errorf("%s's first claim took %v, want at most %v", victim, landed, advLatency)
		}
		if err := squat(a.uids[victim], 0); err == nil {
			a.t.Errorf("evil's reference with %s's UID taken beside %s's", victim, victim)
		}
		a.settle()
	}},
	// 2. One node slowed every other's writes to a shard: with two
	// references sharing a UID, every write became a merge patch on the
	// resourceVersion read, and a node rewriting its own line in a loop
	// made the others' fail with 409 for minutes.
	{"a node writing its own key in a loop", func(a *adversary) {
		s, _ := a.victimShard()
		victim := advVictims[0]
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[victim], 0) }, allPaths[1:]))
		evilPod := a.evilIn[advNS][s]
		stop := hammer(2, func(n int) error {
			l := entryLine(evilPod, evilPod, "10.244.9.9")
			l.Since, l.Until = advT0, advT0.Add(time.Duration(n+1)*time.Second)
			return a.evilPatch(advNS, s, map[string]any{"data": map[string]string{advEvil: l.String()}})
		})
		a.honestLifecycle(victim, podInShard("loop", s))
		tried, took := stop()
		a.t.Logf("evil rewrote its own line %d times (%d taken) meanwhile", tried, took)
		a.restoreEvil(s)
	}},
	// A fight over a keyed identity (evil claiming it again and again, with
	// an earlier ADD) cost the honest node its whole write to the shard.
	{"a fight over a keyed identity", func(a *adversary) {
		ctx := context.Background()
		victim := advVictims[0]
		id := "identity:fight"
		s := placement.ShardOf(id)
		evilPod := a.evilIn[advNS][s]
		ew := a.cp.indexWriterFor(advEvil)
		stop := hammer(6, func(int) error {
			l := entryLine(id, evilPod, "10.244.9.8")
			l.Since = advT0
			return ew.claim(advNS, l)
		})
		// The refusal of a stale claim names it, so that the writer writes
		// the rest at once.
		vw := a.cp.indexWriterFor(victim)
		a.within("evil's claim of "+id, func() (bool, string) { return hintedIn(a.cp.shard(advNS, s), id) == advEvil, "not yet" })
		cur, err := vw.api.Get(ctx, advNS, s)
		if err != nil {
			a.t.Fatal(err)
		}
		lines, _ := cur.Lines(victim)
		stale := entryLine(id, lines[0].Pod, "10.244.1.43")
		stale.Seq = cur.Others(victim, id)[advEvil].Seq // not above evil's
		requireRefused(a.t, victim+" claiming "+id+" on an older view", vw.write(advNS, s, entry.FormatValue(append(lines, stale))),
			"stale claim: node "+victim+": another node claimed "+id+" since")
		pod := podInShard("fv", s)
		p := testPod(pod, nil)
		p.Namespace, p.Spec.NodeName = advNS, victim
		if _, err := a.cp.client.CoreV1().Pods(advNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			a.t.Fatal(err)
		}
		// The same beside a claim of its own (several claims: the index
		// policy's one pass over the other nodes' lines, not its search
		// for one claim): the stale one named, and only it.
		requireRefused(a.t, victim+" claiming "+id+" on an older view and "+pod, vw.write(advNS, s, entry.FormatValue(append(lines, stale, entryLine(pod, pod, "10.244.1.44")))),
			"stale claim: node "+victim+": another node claimed "+id+" since")
		a.stores[victim].add(advEntryIn(advNS, id, pod, "10.244.1.41", time.Now().UTC().Truncate(time.Millisecond), time.Time{}))
		a.honestLifecycle(victim, podInShard("fx", s))
		tried, took := stop()
		a.t.Logf("evil claimed %s %d times (%d taken) meanwhile; the index names %q for it", id, tried, took, hintedIn(a.cp.shard(advNS, placement.ShardOf(id)), id))
		a.stores[victim].remove(pod)
		a.within(victim+" releasing "+id, func() (bool, string) {
			_, ok := a.cp.lineOf(advNS, id, victim)
			return !ok, "still listed"
		})
		a.restoreEvil(s)
	}},
	// 3. One node made a shard nearly a megabyte: managedFields, which the
	// API server takes from the client, on every path (and a reference UID
	// of any length).
	{"managedFields and metadata on every path", func(a *adversary) {
		ctx := context.Background()
		s, _ := a.victimShard()
		cur, err := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, s, metav1.GetOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		size0, _ := shardSize(cur)
		bloat := bloatedFields(900 << 10)
		line := strings.Replace(cur.Data[advEvil], "10.244.9.9", "10.244.9.10", 1)
		mf, _ := json.Marshal(bloat)
		cms := a.evil.CoreV1().ConfigMaps(advNS)
		opts := metav1.PatchOptions{FieldManager: placement.FieldManager}
		withFields := cur.DeepCopy()
		withFields.ManagedFields, withFields.Data[advEvil] = bloat, line
		for path, write := range map[string]func() error{
			"update": func() error {
				_, err := cms.Update(ctx, withFields, metav1.UpdateOptions{FieldManager: placement.FieldManager})
				return err
			},
			"merge patch": func() error {
				_, err := cms.Patch(ctx, s, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"managedFields":%s},"data":{%q:%q}}`, mf, advEvil, line)), opts)
				return err
			},
			"JSON patch": func() error {
				_, err := cms.Patch(ctx, s, types.JSONPatchType, []byte(fmt.Sprintf(`[{"op":"add","path":"/metadata/managedFields","value":%s},{"op":"add","path":"/data/%s","value":%q}]`, mf, advEvil, line)), opts)
				return err
			},
			"strategic merge patch": func() error {
				_, err := cms.Patch(ctx, s, types.StrategicMergePatchType, []byte(fmt.Sprintf(`{"metadata":{"managedFields":%s},"data":{%q:%q}}`, mf, advEvil, line)), opts)
				return err
			},
			"server-side apply": func() error {
				force := true
				body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"managedFields":%s},"data":{%q:%q}}`, s, advNS, mf, advEvil, line)
				_, err := cms.Patch(ctx, s, types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: "attacker", Force: &force})
				return err
			},
		} {
			err := write()
			got, gerr := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, s, metav1.GetOptions{})
			if gerr != nil {
				a.t.Fatal(gerr)
			}
			size, values := shardSize(got)
			a.t.Logf("%s: 900 KiB of managedFields by %s: %v; the shard %d bytes (values %d, managedFields %d)", s, path, errText(err), size, values, managedSize(got))
			if size > values+advOverhead {
				a.t.Errorf("%s: evil's %s made it %d bytes for %d bytes of values", s, path, size, values)
			}
		}
		a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, types.UID(strings.Repeat("f", 900<<10)), -1) }, allPaths)
		after, err := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, s, metav1.GetOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		size1, values := shardSize(after)
		a.t.Logf("%s: %d bytes before, %d after evil's 900 KiB of managedFields and a 900 KiB reference UID on every path (values %d, managedFields %d)",
			s, size0, size1, values, managedSize(after))
		if size1 > values+advOverhead {
			a.t.Errorf("%s grew to %d bytes for %d bytes of values", s, size1, values)
		}
		// A shard evil creates (in a namespace without one).
		ns := advFirstNS
		free := ""
		for i := range placement.ShardCount {
			if !a.cp.shard(ns, placement.ShardName(i)).Exists {
				free = placement.ShardName(i)
				break
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: free, Namespace: ns, Labels: map[string]string{placement.IndexLabel: free[len(placement.ShardPrefix):]},
			ManagedFields: bloat}}
		if _, err := a.evil.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: placement.FieldManager}); err == nil {
			got, _ := a.cp.client.CoreV1().ConfigMaps(ns).Get(ctx, free, metav1.GetOptions{})
			size, values := shardSize(got)
			a.t.Logf("%s/%s created by evil with 900 KiB of managedFields: %d bytes", ns, free, size)
			if size > values+advOverhead {
				a.t.Errorf("%s/%s created at %d bytes", ns, free, size)
			}
			a.cp.adminDeleteShard(ns, free)
		} else {
			a.t.Logf("%s/%s created by evil with 900 KiB of managedFields: refused (%v)", ns, free, err)
		}
		a.largestShard(s)
	}},
}

// evilPatch is evil's strategic-merge patch of shard ns/name; when there
// is none, evil creates it with body's content.
func (a *adversary) evilPatch(ns, name string, body map[string]any) error {
	ctx := context.Background()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	cms := a.evil.CoreV1().ConfigMaps(ns)
	_, err = cms.Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{FieldManager: placement.FieldManager})
	if !apierrors.IsNotFound(err) {
		return err
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(b, &cm); err != nil {
		return err
	}
	cm.Name, cm.Namespace = name, ns
	_, err = cms.Create(ctx, &cm, metav1.CreateOptions{FieldManager: placement.FieldManager})
	return err
}

// honestLifecycle has node's publisher claim pod (made bound to node, in
// advNS), write its reservation's end (a DEL) and release it, each within
// advLatency.
func (a *adversary) honestLifecycle(node, pod string) {
	a.t.Helper()
	ctx := context.Background()
	p := testPod(pod, nil)
	p.Namespace, p.Spec.NodeName = advNS, node
	if _, err := a.cp.client.CoreV1().Pods(advNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	st := a.stores[node]
	at := time.Now().UTC().Truncate(time.Millisecond)
	st.add(advEntryIn(advNS, pod, pod, "10.244.1.42", at, time.Time{}))
	claim := a.within(node+" claiming "+pod, func() (bool, string) {
		l, ok := a.cp.lineOf(advNS, pod, node)
		return ok && l.Running() && hintedIn(a.cp.shard(advNS, placement.ShardOf(pod)), pod) == node, fmt.Sprintf("%+v %v", l, ok)
	})
	until := at.Add(time.Hour)
	st.update(pod, func(e *reservation.Entry) { e.State, e.ExpiresAt, e.ContainerID = reservation.Reserved, until, "" })
	update := a.within(node+" writing "+pod+"'s reservation", func() (bool, string) {
		l, ok := a.cp.lineOf(advNS, pod, node)
		return ok && l.Until.Equal(until), fmt.Sprintf("%+v %v", l, ok)
	})
	st.remove(pod)
	release := a.within(node+" releasing "+pod, func() (bool, string) {
		_, ok := a.cp.lineOf(advNS, pod, node)
		return !ok, "still listed"
	})
	a.t.Logf("%s: claim %v, update %v, release %v", node, claim.Round(time.Millisecond), update.Round(time.Millisecond), release.Round(time.Millisecond))
	for what, d := range map[string]time.Duration{"claim": claim, "update": update, "release": release} {
		if d > advLatency {
			a.t.Errorf("%s's %s of %s took %v, want at most %v", node, what, pod, d, advLatency)
		}
	}
}

// largestShard fills evil's value in shard s to the bound (keyed identities
// of its own pod, 12 claims a write), shows the shard's size and an
// honest node's write time there and in a shard without it, then empties
// evil's value again.
func (a *adversary) largestShard(s string) {
	a.t.Helper()
	ctx := context.Background()
	ew := a.cp.indexWriterFor(advEvil)
	evilPod := a.evilIn[advNS][s]
	next := 0
	newLine := func(seq uint64) placement.Line {
		for ; ; next++ {
			if id := fmt.Sprintf("identity:%s-%d", strings.Repeat("x", 40), next); placement.ShardOf(id) == s {
				next++
				l := entryLine(id, evilPod, "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe")
				l.Since, l.Seq = advT0, seq
				return l
			}
		}
	}
	for full := false; !full; {
		cur, err := ew.api.Get(ctx, advNS, s)
		if err != nil {
			a.t.Fatal(err)
		}
		lines, _ := cur.Lines(advEvil)
		for range placement.MaxClaims {
			l := newLine(cur.ClaimSeq())
			if len(entry.FormatValue(append(slices.Clone(lines), l))) > entry.MaxValueLen {
				full = true
				break
			}
			lines = append(lines, l)
		}
		if err := ew.write(advNS, s, entry.FormatValue(lines)); err != nil {
			a.t.Fatalf("evil filling its value in %s (%d entries): %v", s, len(lines), err)
		}
	}
	held, _ := a.cp.shard(advNS, s).Lines(advEvil)
	full, err := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, s, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	size, values := shardSize(full)
	other := placement.ShardName((int(s[len(s)-1]-'0') + 1) % placement.ShardCount)
	inFull, inOther := a.honestWriteTime(s), a.honestWriteTime(other)
	a.t.Logf("the largest shard a node can make: %s with evil's %d entries (%d characters, the bound), %d bytes (values %d, managedFields %d); "+
		"an honest node's write there: %v (median of 9), %v in a shard without it", s, len(held), len(full.Data[advEvil]), size, values,
		managedSize(full), inFull.Round(time.Microsecond), inOther.Round(time.Microsecond))
	if size > values+advOverhead {
		a.t.Errorf("%s: %d bytes for %d bytes of values", s, size, values)
	}
	a.restoreEvil(s)
}

// honestWriteTime is the median time of 9 writes of victim-1's own value in
// shard s, unchanged but for one entry's until, with its credentials.
func (a *adversary) honestWriteTime(s string) time.Duration {
	w := a.cp.indexWriterFor(advVictims[0])
	var ds []time.Duration
	for i := range 9 {
		cur, err := w.api.Get(context.Background(), advNS, s)
		if err != nil {
			a.t.Fatal(err)
		}
		lines, _ := cur.Lines(w.node)
		if len(lines) == 0 {
			a.t.Fatalf("%s has no entry in %s", w.node, s)
		}
		lines[0].Until = advT0.Add(time.Duration(i+1) * time.Hour)
		start := time.Now()
		if err := w.write(advNS, s, entry.FormatValue(lines)); err != nil {
			a.t.Fatalf("%s writing %s: %v", w.node, s, err)
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// errText is err's text, "taken" for none.
func errText(err error) string {
	if err == nil {
		return "taken"
	}
	if len(err.Error()) > 160 {
		return err.Error()[:160] + "…"
	}
	return err.Error()
}

// bloatedFields is a managedFields entry of about size bytes of made-up
// data keys under the nodes' field manager, well formed (the API server
// takes such from a client as given).
func bloatedFields(size int) []metav1.ManagedFieldsEntry {
	keys := map[string]any{}
	for i := 0; len(keys)*24 < size; i++ {
		keys[fmt.Sprintf("f:made-up-key-%08d", i)] = map[string]any{}
	}
	raw, _ := json.Marshal(map[string]any{"f:data": keys})
	now := metav1.Now()
	return []metav1.ManagedFieldsEntry{{Manager: placement.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}
}

// advEntryIn is an entry of identity (its pod pod) in namespace ns.
func advEntryIn(ns, identity, pod, ip string, at, until time.Time) reservation.Entry {
	e := advEntry(pod, ip, at, until)
	e.Identity.Namespace, e.Identity.Name = ns, identity
	return e
}

// add adds e to the store.
func (s *burstStore) add(e reservation.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = append(s.entries, e)
}

// update changes pod's entries with f, on copies.
func (s *burstStore) update(pod string, f func(*reservation.Entry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.entries {
		if e.PodName == pod {
			rec := *e.Record
			e.Record = &rec
			f(&e)
			s.entries[i] = e
		}
	}
}

// remove removes pod's entries.
func (s *burstStore) remove(pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries = slices.DeleteFunc(s.entries, func(e reservation.Entry) bool { return e.PodName == pod })
}
