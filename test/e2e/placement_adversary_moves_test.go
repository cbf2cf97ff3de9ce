//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

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
	// reference with that UID, victim-1's too.
	{"own reference with another node's UID, after it", func(a *adversary) {
		s, _ := a.victimShard()
		a.accept(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advVictims[0]], -1) }, allPaths[1:]), "after")
		a.check("after", false)
		a.honestStillWrite()
	}},
	// ... and placed before it, the victim's next write merged into evil's.
	{"own reference with another node's UID, before it", func(a *adversary) {
		s, _ := a.victimShard()
		a.accept(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, a.uids[advVictims[0]], 0) }, []string{"JSON patch", "merge patch"}), "before")
		a.check("before", false)
		a.honestStillWrite() // its patch would merge into evil's reference, the first with its UID
	}},
	{"own reference with a made-up UID", func(a *adversary) {
		s, _ := a.victimShard()
		a.accept(a.write(a.evil, s, func(cm *corev1.ConfigMap) { setOwnRef(cm, uuid.NewUUID(), -1) }, allPaths[1:]), "random uid")
	}},
	{"a reference named after another node", func(a *adversary) {
		s, _ := a.victimShard()
		a.refuse(a.write(a.evil, s, func(cm *corev1.ConfigMap) {
			cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: advVictims[0], UID: uuid.NewUUID()})
		}, allPaths))
	}},
	{"another node's reference changed, reordered or dropped", func(a *adversary) {
		s, _ := a.victimShard()
		for _, m := range []func(*metav1.OwnerReference){
			func(r *metav1.OwnerReference) { r.UID = uuid.NewUUID() },
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

// random makes n writes chosen with seed: by evil mostly, some by the
// namespace user and the member of system:nodes. After each that changed a
// shard the honest index must be intact (checked through the hint itself
// every 25 changes and at the end).
func (a *adversary) random(seed uint64, n int) {
	r := rand.New(rand.NewPCG(seed, 38))
	a.t.Logf("random adversary: seed %d, %d writes (E2E_ADVERSARY_SEED=%d repeats it)", seed, n, seed)
	changes := 0
	for i := range n {
		s, id := a.pickShard(r)
		who, c := "evil", a.evil
		switch r.IntN(10) {
		case 0:
			who, c = "editor", a.editor
		case 1:
			who, c = advFake, a.fake
		}
		what, mutate := a.move(r, id)
		path := allPaths[r.IntN(len(allPaths))]
		changed := a.write(c, s, mutate, []string{path})
		if len(changed) == 0 {
			continue
		}
		changes++
		a.accepted = append(a.accepted, fmt.Sprintf("#%d %s: %s by %s on %s", i, who, what, path, s))
		if who != "evil" {
			a.t.Fatalf("seed %d, write %d: %s's %s by %s was accepted", seed, i, who, what, path)
		}
		a.check(fmt.Sprintf("seed %d, write %d (%s by %s)", seed, i, what, path), changes%25 == 0)
	}
	a.check(fmt.Sprintf("seed %d, all %d writes", seed, n), true)
	a.t.Logf("random adversary: %d of %d writes accepted (evil changing its own entries or reference), the honest index intact after each", changes, n)
}

// move picks a mutation of a shard holding honest identity id.
func (a *adversary) move(r *rand.Rand, id string) (string, func(*corev1.ConfigMap)) {
	victim := a.want[id]
	uidChoices := []types.UID{a.uids[advVictims[0]], a.uids[advVictims[1]], a.uids[advEvil], uuid.NewUUID(), ""}
	seqOf := func(cm *corev1.ConfigMap) uint64 {
		rv, _ := parseSeq(cm.ResourceVersion)
		switch r.IntN(7) {
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
			return l.Seq + uint64(r.IntN(3))
		}
		return uint64(r.Int64N(1 << 40))
	}
	pods := []string{id, a.evilPods[r.IntN(len(a.evilPods))], id + "-" + advEvil, "own-b"}
	switch r.IntN(9) {
	case 0:
		u := uidChoices[r.IntN(len(uidChoices))]
		at := r.IntN(2) - 1
		return fmt.Sprintf("own reference uid %q at %d", u, at), func(cm *corev1.ConfigMap) { setOwnRef(cm, u, at) }
	case 1:
		return "another node's reference changed", func(cm *corev1.ConfigMap) {
			i := r.IntN(len(cm.OwnerReferences))
			ref := &cm.OwnerReferences[i]
			switch r.IntN(4) {
			case 0:
				ref.UID = uidChoices[r.IntN(len(uidChoices))]
			case 1:
				ref.Name = []string{advEvil, advVictims[0], advVictims[1], "ghost"}[r.IntN(4)]
			case 2:
				ref.Kind = []string{"Node", "Pod", "node"}[r.IntN(3)]
			default:
				cm.OwnerReferences = append(cm.OwnerReferences, *ref)
			}
		}
	case 2:
		return "references reordered or dropped", func(cm *corev1.ConfigMap) {
			if r.IntN(2) == 0 {
				r.Shuffle(len(cm.OwnerReferences), func(i, j int) {
					cm.OwnerReferences[i], cm.OwnerReferences[j] = cm.OwnerReferences[j], cm.OwnerReferences[i]
				})
			} else if len(cm.OwnerReferences) > 0 {
				i := r.IntN(len(cm.OwnerReferences))
				cm.OwnerReferences = slices.Delete(cm.OwnerReferences, i, i+1)
			}
		}
	case 3, 4:
		return fmt.Sprintf("a claim of %s", id), func(cm *corev1.ConfigMap) {
			l := entryLine(id, pods[r.IntN(len(pods))], "10.244.9.3")
			l.Seq = seqOf(cm)
			lines := []string{l.String()}
			if r.IntN(3) == 0 {
				lines = append(lines, cm.Data[advEvil])
			}
			cm.Data[advEvil] = strings.Join(lines, "\n")
			if r.IntN(4) == 0 {
				setOwnRef(cm, uidChoices[r.IntN(len(uidChoices))], -1)
			}
		}
	case 5:
		return "another node's key", func(cm *corev1.ConfigMap) {
			switch r.IntN(3) {
			case 0:
				delete(cm.Data, victim)
			case 1:
				cm.Data[victim] = strings.ReplaceAll(cm.Data[victim], victim, advEvil)
			default:
				cm.Data[advEvil] = cm.Data[victim]
			}
		}
	case 6:
		return "metadata", func(cm *corev1.ConfigMap) {
			yes := true
			switch r.IntN(5) {
			case 0:
				cm.Annotations = map[string]string{"a": "b"}
			case 1:
				cm.Finalizers = []string{"x.io/y"}
			case 2:
				cm.Immutable = &yes
			case 3:
				cm.Labels = map[string]string{placement.IndexLabel: "3"}
			default:
				cm.Labels["extra"] = "1"
			}
		}
	case 7:
		return "lines of odd forms", func(cm *corev1.ConfigMap) {
			l := entryLine(id, id, "10.244.9.4")
			l.Seq = seqOf(cm)
			s := l.String()
			odd := []string{strings.Replace(s, id, id+"..x", 2), s + "\n" + s, strings.Replace(s, "10.244.9.4", "::ffff:10.244.9.4", 1),
				strings.Replace(s, "10.244.9.4", "2001:DB8::1", 1), strings.Replace(s, " - ", " x ", 1), strings.Repeat("x", 17000),
				strings.Replace(s, fmt.Sprint(l.Seq), "1"+strings.Repeat("0", 18), 1)}
			cm.Data[advEvil] = odd[r.IntN(len(odd))]
		}
	default:
		return "13 claims in one write", func(cm *corev1.ConfigMap) {
			var lines []string
			for k := range 13 {
				p := a.evilPods[k%len(a.evilPods)]
				l := entryLine(fmt.Sprintf("identity:k%d-%d", r.IntN(1000), k), p, "10.244.9.5")
				lines = append(lines, l.String())
			}
			cm.Data[advEvil] = strings.Join(lines, "\n")
		}
	}
}
