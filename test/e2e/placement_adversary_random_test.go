//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// advWrites is how many writes the random phase makes
// (E2E_ADVERSARY_WRITES overrides).
const advWrites = 150

// The writers of the random phase, and what they write.
const (
	byEvil     = "evil"
	byIntruder = nodesGroupUser
	byNSAdmin  = "ns-admin"
	byToken    = "minted-token"

	onVictim       = "another node's record"
	onOwn          = "evil's record"
	onVictimStatus = "another node's record's status"
	onOwnStatus    = "evil's record's status"
	onShard        = "an index shard"
	onCreate       = "a record of another name"
)

// advMove is one write of the random phase, drawn from the seed alone: who
// writes what, which change, by which path, and the numbers it is made of.
type advMove struct {
	I              int
	Who, On, Path  string
	Change, Victim int
	Draw           uint64
}

var (
	advWho     = []string{byEvil, byEvil, byEvil, byEvil, byEvil, byEvil, byIntruder, byNSAdmin, byToken}
	advOn      = []string{onVictim, onVictim, onOwn, onOwn, onOwn, onVictimStatus, onOwnStatus, onShard, onCreate}
	advChanges = 9 // recordMove's changes
)

// advPlan returns the n writes of seed: the same for the same seed,
// whatever the cluster answers.
func advPlan(seed uint64, n int) []advMove {
	r := rand.New(rand.NewPCG(seed, 54))
	out := make([]advMove, n)
	for i := range out {
		m := advMove{I: i, Who: advWho[r.IntN(len(advWho))], On: advOn[r.IntN(len(advOn))], Change: r.IntN(advChanges), Victim: r.IntN(2), Draw: r.Uint64()}
		switch m.On {
		case onVictimStatus, onOwnStatus:
			m.Path = []string{"merge patch", "update"}[r.IntN(2)]
		case onCreate:
			m.Path = "create"
		case onShard:
			m.Path = []string{"update", "merge patch", "JSON patch", "server-side apply", "delete"}[r.IntN(5)]
		default:
			m.Path = []string{"update", "merge patch", "JSON patch", "server-side apply"}[r.IntN(4)]
			if m.Change == 3 && m.Path == "server-side apply" {
				// An apply configuration removes only what its manager
				// applied before: a removal is no apply.
				m.Path = "JSON patch"
			}
		}
		out[i] = m
	}
	return out
}

// planDigest is a short digest of plan: one seed prints the same.
func planDigest(plan []advMove) string {
	h := sha256.New()
	for _, m := range plan {
		fmt.Fprintf(h, "%+v\n", m)
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// TestPlacementAdversaryPlanRepeats: the random phase's writes are a
// function of its seed alone: the same seed plans the same, another seed
// others, and a few hundred writes cover every writer, target and change.
// No cluster.
func TestPlacementAdversaryPlanRepeats(t *testing.T) {
	a, b := advPlan(42, 500), advPlan(42, 500)
	if !slices.Equal(a, b) {
		t.Fatal("seed 42 planned two different runs")
	}
	if slices.Equal(a, advPlan(43, 500)) {
		t.Fatal("seeds 42 and 43 planned the same run")
	}
	who, on, change := map[string]int{}, map[string]int{}, map[int]int{}
	for _, m := range a {
		who[m.Who]++
		on[m.On]++
		change[m.Change]++
	}
	if len(who) != 4 || len(on) != 6 || len(change) != advChanges {
		t.Errorf("500 writes of seed 42 cover %d writers, %d targets, %d changes; want 4, 6, %d", len(who), len(on), len(change), advChanges)
	}
	t.Logf("seed 42: plan %s; writers %v; targets %v", planDigest(a), who, on)
}

// advRandom makes the planned writes of a seed (printed; E2E_ADVERSARY_SEED
// replays it): each is either taken, when the writer may (evil changing its
// own record's entries, Node UID, labels or annotations), or refused with
// the message of the rule that refuses it — anything else (a body that
// cannot be built, another refusal, a write taken that changes nothing)
// fails the test. After every write taken, the controller's judgement of
// evil's record is awaited, and the honest entries must still be indexed
// for their nodes and the hint must still name them. The counts of taken
// and refused writes must be the plan's.
func (a *adversary) advRandom() {
	t := a.t
	seed := advSeed()
	n := advWrites
	if s := os.Getenv("E2E_ADVERSARY_WRITES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	plan := advPlan(seed, n)
	t.Logf("random adversary: seed %d, %d writes, plan %s (E2E_ADVERSARY_SEED=%d replays them)", seed, n, planDigest(plan), seed)
	clients := map[string]writer{
		byEvil:     {name: byEvil, token: a.token(nodeUser(advEvil)), user: nodeUser(advEvil)},
		byIntruder: {name: byIntruder, token: a.token(nodesGroupUser), user: nodesGroupUser},
		byNSAdmin:  {name: byNSAdmin, token: a.nsAdminToken(), user: "system:serviceaccount:" + advNS + ":ns-admin"},
		byToken:    {name: byToken, token: a.mintFlannelToken(), user: "system:serviceaccount:" + flannelNS + ":" + flannelSA},
	}
	dyn := map[string]dynamic.Interface{}
	for k, w := range clients {
		dyn[k] = a.quietClient(w.token)
	}
	var taken, refusedN, wantTaken int
	byRule := map[string]int{}
	for _, m := range plan {
		want := a.expected(m, clients[m.Who].user)
		if want == "" {
			wantTaken++
		}
		err, changed := a.move(m, dyn[m.Who])
		what := fmt.Sprintf("seed %d, write %d: %s: %s of %s by %s", seed, m.I, m.Who, a.changeName(m), m.On, m.Path)
		switch {
		case want == "" && err == nil && changed:
			taken++
			if m.On == onShard {
				a.waitHintsBack(what)
			} else {
				a.settleEvil()
			}
			a.check(what)
		case want == "":
			t.Fatalf("%s: %v (changed: %v), want taken and the record changed", what, err, changed)
		case refused(err, want) && !changed:
			refusedN++
			byRule[want]++
		default:
			t.Fatalf("%s: %v (changed: %v), want refused with %q", what, err, changed, want)
		}
	}
	if taken != wantTaken || taken+refusedN != n {
		t.Fatalf("random adversary: %d taken, %d refused of %d, want %d taken", taken, refusedN, n, wantTaken)
	}
	a.restoreEvil()
	t.Logf("random adversary: %d writes, %d taken (evil's own record; the honest index and hint intact after each), %d refused, by rule: %v", n, taken, refusedN, byRule)
}

// expected is the refusal m must meet ("": it is taken), as user.
func (a *adversary) expected(m advMove, user string) string {
	victim := advVictims[m.Victim]
	rbacOnly := m.Who == byNSAdmin || m.Who == byToken
	switch m.On {
	case onShard:
		switch {
		case m.Who != byNSAdmin:
			return shardsRBACWant
		case m.Path == "delete": // RBAC lets a namespace's editors, and so does the policy: the controller writes it again
			return ""
		}
		honest := slices.Sorted(mapsKeys(a.want))
		return indexWriterRefusal(a.shardOf(advNS, honest[m.Draw%uint64(len(honest))]))
	case onVictimStatus, onOwnStatus:
		return rbacWant("noderecords/status")
	case onCreate:
		if rbacOnly {
			return rbacWant("noderecords")
		}
		return notOwn(user, a.createName(m))
	case onVictim:
		if rbacOnly {
			return rbacWant("noderecords")
		}
		return notOwn(user, victim)
	}
	switch {
	case rbacOnly:
		return rbacWant("noderecords")
	case m.Who == byIntruder:
		return notOwn(user, advEvil)
	case m.Change >= 7:
		return noRefs
	}
	return ""
}

// createName is the name (or its start, for a generated one) of the
// record m creates.
func (a *adversary) createName(m advMove) string {
	switch m.Draw % 4 {
	case 0:
		return advVictims[m.Victim]
	case 1:
		return fmt.Sprintf("node-%d", m.Draw%1000)
	case 2:
		return advEvil
	}
	return advVictims[m.Victim]
}

// changeName says what m changes.
func (a *adversary) changeName(m advMove) string {
	switch m.On {
	case onShard:
		return []string{"an identity pointed at evil", "an identity removed", "its label (the other series')"}[m.Draw%3]
	case onVictimStatus, onOwnStatus:
		return "a claim indexed"
	case onCreate:
		return map[bool]string{true: "generateName " + a.createName(m), false: "name " + a.createName(m)}[m.Draw%4 >= 2]
	}
	return []string{"a claim of an honest identity for evil's pod", "a claim of an honest identity with a made-up pod UID",
		"a claim of a victim's running pod", "its entries removed", "its Node UID", "a label", "an annotation", "an ownerReference", "a finalizer"}[m.Change]
}

// recordMove is the change m makes to a record (m.Change), with the move's
// number as a label, so that every move changes something.
func (a *adversary) recordMove(m advMove) func(*unstructured.Unstructured) {
	honest := slices.Sorted(mapsKeys(a.want))
	id := honest[m.Draw%uint64(len(honest))]
	evilPod := a.evilBase[m.Draw%uint64(len(a.evilBase))]
	yes := true
	return func(u *unstructured.Unstructured) {
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["adv.stickyip.io/move"] = strconv.Itoa(m.I)
		u.SetLabels(labels)
		switch m.Change {
		case 0:
			setEntry(u, recordEntry(advNS, id, evilPod.Pod, string(evilPod.PodUID), "10.244.9.20"))
		case 1:
			pod := id
			if key, ok := strings.CutPrefix(id, "identity:"); ok {
				pod = key + "-7d9f8-9"
			}
			setEntry(u, recordEntry(advNS, id, pod, string(advUID(m.Draw)), "10.244.9.21"))
		case 2:
			p, err := a.cp.client.CoreV1().Pods(advNS).Get(context.Background(), "queue-7d9f8-0", metav1.GetOptions{})
			if err != nil {
				a.t.Fatal(err)
			}
			setEntry(u, recordEntry(advNS, "identity:queue", p.Name, string(p.UID), "10.244.9.22"))
		case 3:
			unstructured.RemoveNestedField(u.Object, "spec", "entries")
		case 4:
			uid := []string{string(advUID(m.Draw)), string(a.uids[advVictims[m.Victim]]), string(a.uids[advEvil])}[m.Draw%3]
			_ = unstructured.SetNestedField(u.Object, uid, "spec", "nodeUID")
		case 5:
			labels["adv.stickyip.io/x"] = strconv.FormatUint(m.Draw%100, 10)
			u.SetLabels(labels)
		case 6:
			u.SetAnnotations(map[string]string{"adv.stickyip.io/x": strconv.FormatUint(m.Draw, 10)})
		case 7:
			uid := []string{string(advUID(m.Draw)), string(a.uids[advVictims[m.Victim]]), string(a.uids[advEvil])}[m.Draw%3]
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: advVictims[m.Victim], UID: types.UID(uid), BlockOwnerDeletion: &yes}})
		case 8:
			u.SetFinalizers([]string{"example.com/keep-" + strconv.Itoa(m.I)})
		}
	}
}

// move makes m's write with client c; it returns the API server's answer
// and whether the object written changed.
func (a *adversary) move(m advMove, c dynamic.Interface) (error, bool) {
	t := a.t
	ctx := context.Background()
	recs := c.Resource(recordsGVR)
	switch m.On {
	case onShard:
		honest := slices.Sorted(mapsKeys(a.want))
		id := honest[m.Draw%uint64(len(honest))]
		name := a.shardOf(advNS, id)
		admin := a.cp.indexAs(a.cp.adminToken, advNS)
		cur, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var want *unstructured.Unstructured
		if m.Path != "delete" {
			want = cur.DeepCopy()
			switch m.Draw % 3 {
			case 0:
				_, key := placementv1.ShardKey(id)
				_ = unstructured.SetNestedField(want.Object, advEvil, "data", key)
			case 1:
				_, key := placementv1.ShardKey(id)
				unstructured.RemoveNestedField(want.Object, "data", key)
			default: // the other series' label
				other := map[string]string{placementv1.Names: placementv1.Keyed, placementv1.Keyed: placementv1.Names}[cur.GetLabels()[placementv1.IndexLabel]]
				want.SetLabels(map[string]string{placementv1.IndexLabel: other})
			}
		}
		err = writePaths(t, c.Resource(indexGVR).Namespace(advNS), cur, want)[m.Path]()
		after, gerr := admin.Get(ctx, name, metav1.GetOptions{})
		return err, gerr != nil || after.GetResourceVersion() != cur.GetResourceVersion()
	case onVictimStatus, onOwnStatus:
		name := map[bool]string{true: advVictims[m.Victim], false: advEvil}[m.On == onVictimStatus]
		before := a.cp.recordOf(name)
		var err error
		if m.Path == "update" {
			cur, gerr := a.admin.Get(ctx, name, metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			_ = unstructured.SetNestedField(cur.Object, string(advUID(m.Draw)), "status", "nodeUID")
			_, err = recs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		} else {
			body := fmt.Sprintf(`{"status":{"claims":[{"namespace":%q,"identity":"db0-1","pod":"ev-0","podUID":%q,"indexed":true}]}}`, advNS, a.evilBase[0].PodUID)
			_, err = recs.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
		}
		return err, a.cp.recordOf(name).ResourceVersion != before.ResourceVersion
	case onCreate:
		obj := recordObject("", string(a.uids[advEvil]), a.evilBase[0])
		if m.Draw%4 >= 2 {
			obj.SetGenerateName(a.createName(m))
		} else {
			obj.SetName(a.createName(m))
		}
		got, err := recs.Create(ctx, obj, metav1.CreateOptions{})
		if err == nil {
			_ = a.admin.Delete(ctx, got.GetName(), metav1.DeleteOptions{})
		}
		return err, err == nil
	}
	name := map[bool]string{true: advVictims[m.Victim], false: advEvil}[m.On == onVictim]
	cur, err := a.admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := cur.DeepCopy()
	a.recordMove(m)(want)
	err = writePaths(t, recs, cur, want)[m.Path]()
	after, gerr := a.admin.Get(ctx, name, metav1.GetOptions{})
	return err, gerr != nil || string(bare(after)) != string(bare(cur))
}

// waitHintsBack waits, after a namespace's editor deleted a shard of advNS,
// until the controller has written it again and the hint names every
// honest identity's node again.
func (a *adversary) waitHintsBack(after string) {
	a.t.Helper()
	start := time.Now()
	eventually(a.t, "the hint back after "+after, time.Minute, 200*time.Millisecond, func() (bool, string) {
		for _, id := range slices.Sorted(mapsKeys(a.want)) {
			if got := a.hinted(advNS, id); got != a.want[id] {
				return false, fmt.Sprintf("%s sent to %q", id, got)
			}
		}
		return true, ""
	})
	a.t.Logf("after %s: the controller wrote the shard again, the hint back within %v", after, time.Since(start).Round(time.Millisecond))
}
