//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/placement"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// allPaths are writePaths' names.
var allPaths = []string{"update", "merge patch", "JSON patch", "strategic merge patch", "server-side apply"}

// advRegression is an attack found by reading or by the random adversary,
// kept: each runs before the random phase, and the honest index must be
// intact after it.
type advRegression struct {
	name string
	run  func(a *adversary)
}

// victimShard is a shard where victim-1 has entries, and one of them.
func (a *adversary) victimShard() (string, string) {
	for _, id := range slices.Sorted(mapsKeys(a.want)) {
		if a.want[id] == advVictims[0] {
			return placement.ShardOf(id), id
		}
	}
	a.t.Fatal("no victim identity")
	return "", ""
}

// setOwnRef makes evil's reference in cm carry uid, at index at (-1: where
// it is; 0: first).
func setOwnRef(cm *corev1.ConfigMap, uid types.UID, at int) {
	i := slices.IndexFunc(cm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == advEvil })
	r := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: advEvil, UID: uid}
	if i >= 0 {
		cm.OwnerReferences = slices.Delete(cm.OwnerReferences, i, i+1)
	}
	if at == 0 {
		cm.OwnerReferences = append([]metav1.OwnerReference{r}, cm.OwnerReferences...)
	} else {
		cm.OwnerReferences = append(cm.OwnerReferences, r)
	}
}

var advRegressions = []advRegression{
	// Issue 38, reproduced on 1.36: the garbage collector, finding evil's
	// reference dangling (its UID names Node victim-1), deleted every
	// reference with that UID, victim-1's too. Issue 47: the index policy
	// that then refused the collector kept every other dangling reference of
	// the shard. No reference UID may be shared: refused.
	{"own reference with another node's UID, after it", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advVictims[0]], -1) }, allPaths[1:]))
		a.honestStillWrite()
	}},
	// ... and placed before it, the victim's next write merged into evil's.
	{"own reference with another node's UID, before it", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advVictims[0]], 0) }, []string{"JSON patch", "merge patch"}))
		a.honestStillWrite() // its patch would merge into evil's reference, the first with its UID
	}},
	// Taken (the policy cannot tell a UID is made up), and removed by the
	// garbage collector with evil's entries: the write it made, let.
	{"own reference with a made-up UID", func(a *adversary) {
		s, _ := a.victimShard()
		for i, path := range allPaths[1:] {
			uid := advUID(uint64(i) + 1)
			from := time.Now()
			changed := a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, uid, -1) }, []string{path})
			a.accept(changed, "made-up uid")
			if len(changed) == 0 {
				continue
			}
			a.collected(advNS, s, from, "evil's made-up reference", uid)
			if cur := a.cp.shard(advNS, s); cur.Values[advEvil] != "" {
				a.t.Fatalf("the collector removed evil's reference in %s; its entries stayed: %q", s, cur.Values[advEvil])
			}
			a.restoreEvil(s)
		}
	}},
	{"a reference named after another node", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) {
			cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: advVictims[0], UID: advUID(98)})
		}, allPaths))
	}},
	{"another node's reference changed, reordered or dropped", func(a *adversary) {
		s, _ := a.victimShard()
		for _, m := range []func(*metav1.OwnerReference){
			func(r *metav1.OwnerReference) { r.UID = advUID(99) },
			func(r *metav1.OwnerReference) { r.Name = advEvil },
			func(r *metav1.OwnerReference) { r.APIVersion = "v2" },
			func(r *metav1.OwnerReference) { r.Kind = "Pod" },
			func(r *metav1.OwnerReference) { yes := true; r.Controller = &yes },
			func(r *metav1.OwnerReference) { yes := true; r.BlockOwnerDeletion = &yes },
		} {
			a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) {
				i := slices.IndexFunc(cm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == advVictims[0] })
				m(&cm.OwnerReferences[i])
			}, allPaths))
		}
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { slices.Reverse(cm.OwnerReferences) }, allPaths))
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) {
			cm.OwnerReferences = slices.DeleteFunc(cm.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Name == advVictims[0] })
		}, allPaths))
	}},
	{"another node's key copied, changed or removed", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { cm.Data[advEvil] = cm.Data[advVictims[0]] }, allPaths))
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { cm.Data[advVictims[0]] += "\n" + cm.Data[advEvil] }, allPaths))
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { delete(cm.Data, advVictims[0]) }, allPaths))
	}},
	{"annotations, finalizers, immutability, binaryData, labels", func(a *adversary) {
		s, _ := a.victimShard()
		yes := true
		for _, m := range []func(*corev1.ConfigMap){
			func(cm *corev1.ConfigMap) { cm.Annotations = map[string]string{"x": "y"} },
			func(cm *corev1.ConfigMap) { cm.Finalizers = []string{"example.com/keep"} },
			func(cm *corev1.ConfigMap) { cm.Immutable = &yes },
			func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"x": {1}} },
			func(cm *corev1.ConfigMap) { cm.Labels["x"] = "y" },
			func(cm *corev1.ConfigMap) { cm.Labels[placement.IndexLabel] = "7" },
		} {
			a.refuse(a.write(a.evil, s, m, allPaths))
			a.refuse(a.write(a.editor, s, m, allPaths))
		}
	}},
	{"a member of system:nodes that is no node", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.fake, s, func(cm *corev1.ConfigMap) { cm.Data[advFake] = cm.Data[advEvil] }, allPaths))
		_, err := a.fake.CoreV1().ConfigMaps(advNS).Create(context.Background(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "anything", Namespace: advNS}}, metav1.CreateOptions{})
		if err == nil {
			a.t.Errorf("%s (in system:nodes, no node) created a ConfigMap", advFake)
		}
	}},
	{"a namespace user's label on an ordinary ConfigMap, and generateName", func(a *adversary) {
		ctx := context.Background()
		cms := a.editor.CoreV1().ConfigMaps(advNS)
		own, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: advNS}}, metav1.CreateOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		own.Labels = map[string]string{placement.IndexLabel: "0"}
		if _, err := cms.Update(ctx, own, metav1.UpdateOptions{}); err == nil {
			a.t.Error("a namespace user labelled a ConfigMap of theirs as an index shard")
		}
		gen, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: placement.ShardPrefix, Namespace: advNS}}, metav1.CreateOptions{})
		if err == nil && gen.Name != "" && strings.HasPrefix(gen.Name, placement.ShardPrefix) && len(gen.Name) == len(placement.ShardPrefix)+1 {
			a.t.Errorf("generateName made shard %s", gen.Name)
		}
	}},
	// A line no node could have written under the policy (a seq beyond the
	// shard's resourceVersion), as if planted while the policy was away:
	// never counted.
	{"a future seq written while the index policy was away", func(a *adversary) {
		ctx := context.Background()
		s, id := a.victimShard()
		bindings := a.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
		b, err := bindings.Get(ctx, "stickyip-placement-index", metav1.GetOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		if err := bindings.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
			a.t.Fatal(err)
		}
		eventually(a.t, "the index policy away", time.Minute, 200*time.Millisecond, func() (bool, string) {
			changed := a.write(a.evil, s, func(cm *corev1.ConfigMap) {
				cur, _ := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, s, metav1.GetOptions{})
				rv, _ := parseSeq(cur.ResourceVersion)
				l := entryLine(id, id, "10.244.9.1")
				l.Seq = rv + 1_000_000
				cm.Data[advEvil] += "\n" + l.String()
			}, []string{"strategic merge patch"})
			return len(changed) == 1, "refused"
		})
		b.ResourceVersion, b.UID = "", ""
		if _, err := bindings.Create(ctx, b, metav1.CreateOptions{}); err != nil {
			a.t.Fatal(err)
		}
		a.accepted = append(a.accepted, "planted with the policy away: a future seq for "+id)
		// Back once a line evil may not write (in its own key: only evil's
		// entries are at stake while the policy is still away) is refused.
		eventually(a.t, "the index policy back", time.Minute, 200*time.Millisecond, func() (bool, string) {
			return len(a.write(a.evil, s, func(cm *corev1.ConfigMap) { cm.Data[advEvil] += "\ngarbage" }, []string{"strategic merge patch"})) == 0, ""
		})
		// What else was written while it was away stays, and does not stop
		// the nodes' writes: an administrator's label, say.
		if len(a.write(a.cp.client, s, func(cm *corev1.ConfigMap) { cm.Labels["backup.example.com/include"] = "true" }, []string{"strategic merge patch"})) != 1 {
			a.t.Fatal("an administrator could not label a shard")
		}
	}},
}

// accept notes what the adversary got through.
func (a *adversary) accept(changed []string, what string) {
	for _, p := range changed {
		a.accepted = append(a.accepted, what+" by "+p)
	}
}

// refuse fails the test if any path changed the shard.
func (a *adversary) refuse(changed []string) {
	a.t.Helper()
	if len(changed) > 0 {
		a.t.Errorf("accepted by %v, want refused", changed)
	}
}

// advMove is one write of the random adversary, drawn from the seed alone
// (advPlan): who writes, which honest identity's shard, what, by which
// path, and the numbers the change is made of.
type advMove struct {
	I     int
	Who   string
	ID    string // an honest identity: its shard is written
	Kind  int    // which change (move)
	Path  string
	Draws [8]uint64
}

// advPlan returns the n writes of seed: the same for the same seed, whatever
// the cluster answers (resourceVersions, UIDs and clocks are not drawn: a
// change says "the shard's resourceVersion plus one", "victim-1's UID").
func advPlan(seed uint64, n int, ids []string) []advMove {
	r := rand.New(rand.NewPCG(seed, 38))
	out := make([]advMove, n)
	for i := range out {
		m := advMove{I: i, ID: ids[r.IntN(len(ids))], Who: advEvil, Kind: r.IntN(10), Path: allPaths[r.IntN(len(allPaths))]}
		switch r.IntN(10) {
		case 0:
			m.Who = "editor"
		case 1:
			m.Who = advFake
		}
		for k := range m.Draws {
			m.Draws[k] = r.Uint64()
		}
		out[i] = m
	}
	return out
}

// planDigest is a short digest of plan: two runs with one seed print the
// same.
func planDigest(plan []advMove) string {
	h := sha256.New()
	for _, m := range plan {
		fmt.Fprintf(h, "%d %s %s %d %s %v\n", m.I, m.Who, m.ID, m.Kind, m.Path, m.Draws)
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// advUID is a UUID made of n: a made-up Node UID a seed replays.
func advUID(n uint64) types.UID {
	return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(n>>32), n&0xffffffffffff))
}

// random makes n writes planned from seed: by evil mostly, some by the
// namespace user and the member of system:nodes. After each that changed a
// shard the honest index must be intact, the hint itself must name the
// honest node of the identities in that shard, and a reference it left
// dangling must have been removed by the garbage collector (the audit
// log). Every advDeleteEvery writes a node that owns shards is deleted,
// with a background, an orphaning or a foreground cascade in turn, evil
// having tried to give its own references that node's UID first.
func (a *adversary) random(seed uint64, n int) {
	plan := advPlan(seed, n, slices.Sorted(mapsKeys(a.want)))
	a.t.Logf("random adversary: seed %d, %d writes, plan %s (E2E_ADVERSARY_SEED=%d repeats them)", seed, n, planDigest(plan), seed)
	changes, dangling, deleted := 0, 0, 0
	for _, m := range plan {
		if m.I%advDeleteEvery == advDeleteEvery/2 {
			a.deleteDuringRun(m)
			deleted++
		}
		s := placement.ShardOf(m.ID)
		c := map[string]kubernetes.Interface{advEvil: a.evil, "editor": a.editor, advFake: a.fake}[m.Who]
		what, mutate := a.move(m)
		from := time.Now()
		changed := a.write(c, s, mutate, []string{m.Path})
		if len(changed) == 0 {
			continue
		}
		changes++
		a.accepted = append(a.accepted, fmt.Sprintf("#%d %s: %s by %s on %s", m.I, m.Who, what, m.Path, s))
		if m.Who != advEvil {
			a.t.Fatalf("seed %d, write %d: %s's %s by %s was accepted", seed, m.I, m.Who, what, m.Path)
		}
		if uid := a.evilRef(s); uid != "" && uid != a.uids[advEvil] {
			// evil's reference is dangling: the collector removes it, with
			// evil's entries; evil writes them again.
			a.collected(advNS, s, from, fmt.Sprintf("seed %d, write %d (%s by %s)", seed, m.I, what, m.Path), uid)
			dangling++
			a.restoreEvil(s)
		}
		a.check(fmt.Sprintf("seed %d, write %d (%s by %s)", seed, m.I, what, m.Path), []string{s})
	}
	a.check(fmt.Sprintf("seed %d, all %d writes", seed, n), nil)
	a.t.Logf("random adversary: %d of %d writes accepted (evil changing its own entries or reference; %d left it dangling, each removed by the collector), %d nodes deleted, the honest index intact and the hint naming the honest nodes after each",
		changes, n, dangling, deleted)
}

// advDeleteEvery is how often the random adversary deletes a node.
const advDeleteEvery = 300

// deleteDuringRun has one of advGone own two shards (m's identity's and
// the next), lets evil try to give its own reference there that node's UID
// (refused), and deletes the node, a background, an orphaning and a
// foreground cascade in turn (issue 47: a copied UID kept a deleted node
// counting).
func (a *adversary) deleteDuringRun(m advMove) {
	k := m.I / advDeleteEvery
	name := advGone[k%len(advGone)]
	s := placement.ShardOf(m.ID)
	next := placement.ShardName((int(s[len(s)-1]-'0') + 1) % placement.ShardCount)
	a.spawn(advNS, name, s, next)
	a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[name], int(m.Draws[0]%2)-1) }, allPaths[1:]))
	policy := []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationOrphan, metav1.DeletePropagationForeground}[k%3]
	a.deleteNode(advNS, name, policy)
	a.check(fmt.Sprintf("Node %s deleted (%s) during the run", name, policy), []string{s, next})
}

// evilRef is the UID of evil's reference in shard s of advNS ("": none).
func (a *adversary) evilRef(s string) types.UID {
	for _, r := range a.cp.shard(advNS, s).Refs {
		if r.Kind == "Node" && r.Name == advEvil {
			return r.UID
		}
	}
	return ""
}

// restoreEvil makes evil's value and reference in shard s of advNS what
// they were at the start, its one pod's entry and its own Node's UID (the
// collector removed them, or evil changed them: a reference with another
// UID is first left to the collector, which removes it).
func (a *adversary) restoreEvil(s string) {
	a.t.Helper()
	pod := a.evilIn[advNS][s]
	w := a.cp.indexWriterFor(advEvil)
	eventually(a.t, "evil's entry in "+s+" again", time.Minute, 100*time.Millisecond, func() (bool, string) {
		cur, err := w.api.Get(context.Background(), advNS, s)
		if err != nil {
			return false, err.Error()
		}
		l := entryLine(pod, pod, "10.244.9.9")
		l.Since, l.Seq = advT0, cur.ClaimSeq()
		uid := a.evilRef(s)
		if held, _ := cur.Lines(advEvil); len(held) == 1 && held[0].SameClaim(l) && uid == w.uid {
			return true, ""
		}
		if uid != "" && uid != w.uid {
			return false, "evil's reference carries " + string(uid) + ": the collector's to remove"
		}
		return false, fmt.Sprint(w.write(advNS, s, l.String()))
	})
}

// move is the change m makes to a shard holding honest identity m.ID; it
// takes its numbers from m.Draws, never from the shard, so that a seed
// replays the same changes.
func (a *adversary) move(m advMove) (string, func(*corev1.ConfigMap)) {
	id := m.ID
	victim := a.want[id]
	d := 0
	pick := func(n int) int { v := int(m.Draws[d%len(m.Draws)] % uint64(n)); d++; return v }
	uidChoices := []types.UID{a.uids[advVictims[0]], a.uids[advVictims[1]], a.uids[advEvil], advUID(m.Draws[7]), "", "not-a-uuid"}
	seqOf := func(cm *corev1.ConfigMap) uint64 {
		rv, _ := parseSeq(cm.ResourceVersion)
		switch pick(7) {
		case 0:
			return 0
		case 1:
			return rv
		case 2:
			return rv + 1
		case 3:
			return rv - 1
		case 4:
			return 999999999999999999
		case 5:
			l, _ := a.cp.lineOf(advNS, id, victim)
			return l.Seq + uint64(pick(3))
		}
		return m.Draws[6] % (1 << 40)
	}
	line := func(id, pod, ip string) placement.Line {
		l := entryLine(id, pod, ip)
		l.Since = advT0.Add(time.Duration(m.Draws[5]%1000) * time.Second)
		return l
	}
	pods := []string{id, a.evilPods[pick(len(a.evilPods))], id + "-" + advEvil, "own-b"}
	switch m.Kind {
	case 0:
		u := uidChoices[pick(len(uidChoices))]
		at := pick(2) - 1
		return fmt.Sprintf("own reference uid %q at %d", u, at), func(cm *corev1.ConfigMap) { setOwnRef(cm, u, at) }
	case 1:
		i, how, u, name, kind := pick(1<<20), pick(4), uidChoices[pick(len(uidChoices))], []string{advEvil, advVictims[0], advVictims[1], "ghost"}[pick(4)],
			[]string{"Node", "Pod", "node"}[pick(3)]
		return "another node's reference changed", func(cm *corev1.ConfigMap) {
			if len(cm.OwnerReferences) == 0 {
				return
			}
			ref := &cm.OwnerReferences[i%len(cm.OwnerReferences)]
			switch how {
			case 0:
				ref.UID = u
			case 1:
				ref.Name = name
			case 2:
				ref.Kind = kind
			default:
				cm.OwnerReferences = append(cm.OwnerReferences, *ref)
			}
		}
	case 2:
		shuffle, i := pick(2) == 0, pick(1<<20)
		return "references reordered or dropped", func(cm *corev1.ConfigMap) {
			switch {
			case shuffle:
				slices.Reverse(cm.OwnerReferences)
				if len(cm.OwnerReferences) > 2 {
					k := i % len(cm.OwnerReferences)
					cm.OwnerReferences[0], cm.OwnerReferences[k] = cm.OwnerReferences[k], cm.OwnerReferences[0]
				}
			case len(cm.OwnerReferences) > 0:
				k := i % len(cm.OwnerReferences)
				cm.OwnerReferences = slices.Delete(cm.OwnerReferences, k, k+1)
			}
		}
	case 3, 4:
		pod, keep, reref, u := pods[pick(len(pods))], pick(3) == 0, pick(4) == 0, uidChoices[pick(len(uidChoices))]
		return fmt.Sprintf("a claim of %s for %s", id, pod), func(cm *corev1.ConfigMap) {
			l := line(id, pod, "10.244.9.3")
			l.Seq = seqOf(cm)
			lines := []string{l.String()}
			if keep {
				lines = append(lines, cm.Data[advEvil])
			}
			cm.Data[advEvil] = strings.Join(lines, "\n")
			if reref {
				setOwnRef(cm, u, -1)
			}
		}
	case 5:
		how := pick(3)
		return "another node's key", func(cm *corev1.ConfigMap) {
			switch how {
			case 0:
				delete(cm.Data, victim)
			case 1:
				cm.Data[victim] = strings.ReplaceAll(cm.Data[victim], victim, advEvil)
			default:
				cm.Data[advEvil] = cm.Data[victim]
			}
		}
	case 6:
		how := pick(6)
		return "metadata", func(cm *corev1.ConfigMap) {
			yes := true
			switch how {
			case 0:
				cm.Annotations = map[string]string{"a": "b"}
			case 1:
				cm.Finalizers = []string{"x.io/y"}
			case 2:
				cm.Immutable = &yes
			case 3:
				cm.Labels = map[string]string{placement.IndexLabel: "3"}
			case 4:
				cm.ManagedFields = bloatedFields(64 << 10)
			default:
				cm.Labels["extra"] = "1"
			}
		}
	case 7:
		which := pick(7)
		return "lines of odd forms", func(cm *corev1.ConfigMap) {
			l := line(id, id, "10.244.9.4")
			l.Seq = seqOf(cm)
			s := l.String()
			odd := []string{strings.Replace(s, id, id+"..x", 2), s + "\n" + s, strings.Replace(s, "10.244.9.4", "::ffff:10.244.9.4", 1),
				strings.Replace(s, "10.244.9.4", "2001:DB8::1", 1), strings.Replace(s, " - ", " x ", 1), strings.Repeat("x", 17000),
				strings.Replace(s, fmt.Sprint(l.Seq), "1"+strings.Repeat("0", 18), 1)}
			cm.Data[advEvil] = odd[which]
		}
	default:
		base := pick(1000)
		return "13 claims in one write", func(cm *corev1.ConfigMap) {
			var lines []string
			for k := range 13 {
				p := a.evilPods[k%len(a.evilPods)]
				lines = append(lines, line(fmt.Sprintf("identity:k%d-%d", base, k), p, "10.244.9.5").String())
			}
			cm.Data[advEvil] = strings.Join(lines, "\n")
		}
	}
}
