//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/test/harness"
)

// TestPlacementAdversary replays, against the placement design of one
// writer per object, every attack of the rounds of the shared index shards
// and the ones found against it, on a real kube-apiserver (Node,RBAC,
// NodeRestriction) with deploy/placement applied as its README says,
// stickyip-controller beside it with its own credentials and a
// kube-controller-manager (its garbage collector finishes the orphaning
// and foreground deletions of Nodes). Honest nodes publish their pods'
// entries with their own credentials; "evil", a compromised node with pods
// of its own, a member of system:nodes that is no node, a namespace's
// administrator and a token evil mints for a pod bound to it then write
// everything they can reach:
//   - records: another node's record on every write path and field,
//     evil's own record's ownerReferences and finalizers, its bounds, a
//     its largest record (advRecords, advOwnRecord);
//   - the controller's objects: the records' status and the index shards
//     (advRBAC), each refusal beside a grant that lets the same write in;
//   - claims the controller must refuse (advClaims), a minted token
//     (advMintedToken);
//   - time: a flood of evil's commits while honest nodes claim, update
//     and release (advStarvation); Nodes deleted while evil floods, with
//     what evil can hang on a Node (advDeletions); an honest namespace of
//     1 MiB of index with 253-character identities (advLongIdentities);
//   - a seeded random sequence of those writes (advRandom).
//
// Every refusal must name what refused it (the policy's message, RBAC's,
// the schema's), and comes with a control: the same body taken on an object
// the writer may change, or the same write taken with the rule removed.
// After every step the honest entries are indexed for their nodes and the
// hint itself (a dry-run creation of the re-created pod) names them.
func TestPlacementAdversary(t *testing.T) {
	bins := findBins(t)
	bins.require(t, "kube-controller-manager")
	netns, h := newNetns(t, "adv")
	nodes := slices.Concat(advVictims, []string{advEvil}, advGone, longNodes)
	cp := newControlPlane(t, bins, harness.ShortTempDir(t), testLogDir(t), netns, h, "127.0.0.1", nodes...)
	start := time.Now()
	cp.startControlPlane()
	cp.startControllerManager()
	cp.applyPlacement()
	cp.startPlacementController()
	a := newAdversary(t, cp)
	a.publishHonestly()
	t.Logf("adversary: cluster, deploy/placement, the controller and the honest index ready in %v", time.Since(start).Round(time.Second))
	for _, p := range []struct {
		name string
		run  func()
	}{
		{"records", a.advRecords},
		{"own-record", a.advOwnRecord},
		{"rule-removed", a.advRuleRemoved},
		{"rbac", a.advRBAC},
		{"claims", a.advClaims},
		{"minted-token", a.advMintedToken},
		{"starvation", a.advStarvation},
		{"deletions", a.advDeletions},
		{"long-identities", a.advLongIdentities},
		{"random", a.advRandom},
	} {
		a.phase(p.name, p.run)
	}
	t.Logf("adversary: %v in all", time.Since(start).Round(time.Second))
}

const (
	advNS     = "adv"      // the honest nodes' and evil's pods
	advLongNS = "adv-long" // an honest namespace of 1 MiB of index, 253-character identities
	advCtlNS  = "adv-ctl"  // what the controls write
	advEvil   = "evil"
)

var (
	advVictims = []string{"victim-1", "victim-2", "victim-3"}
	// advGone are the Nodes deleted during the run.
	advGone = []string{"gone-0", "gone-1", "gone-2", "gone-3"}
)

// adversary is the cluster under attack and what the test knows of it.
type adversary struct {
	root, t *testing.T
	cp      *controlPlane
	uids    map[string]types.UID // Node UIDs
	// want is each honest identity of advNS and the node the index must
	// give it to.
	want map[string]string
	// evilBase is evil's record as it publishes it honestly: one entry per
	// pod of its own.
	evilBase []placementv1.Entry
	evilPods []string
	admin    dynamic.NamespaceableResourceInterface // records, as admin
	nsAdmin  string                                 // the token of advNS's administrator, once made
}

// nsAdminToken is the token of advNS's administrator (the default admin
// role bound there).
func (a *adversary) nsAdminToken() string {
	if a.nsAdmin == "" {
		a.nsAdmin = a.cp.namespaceAdminToken(advNS)
	}
	return a.nsAdmin
}

func newAdversary(t *testing.T, cp *controlPlane) *adversary {
	ctx := context.Background()
	a := &adversary{root: t, t: t, cp: cp, uids: map[string]types.UID{}, want: map[string]string{}, admin: cp.recordsAs(cp.adminToken)}
	for _, n := range append(slices.Clone(advVictims), advEvil) {
		nd, err := cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.uids[n] = nd.UID
	}
	for _, ns := range []string{advNS, advLongNS, advCtlNS} {
		cp.ensureNamespace(ns)
	}
	return a
}

// phase runs f as subtest name, with the cluster's helpers failing that
// subtest. Each phase leaves the cluster as it found it (what it changes
// put back, by a cleanup when it fails): a failed phase does not stop the
// next.
func (a *adversary) phase(name string, f func()) {
	a.root.Run(name, func(t *testing.T) {
		a.t, a.cp.t = t, t
		defer func() { a.t, a.cp.t = a.root, a.root }()
		start := time.Now()
		f()
		a.check(name)
		t.Logf("%s: %v", name, time.Since(start).Round(100*time.Millisecond))
	})
}

// token is the bearer token of user.
func (a *adversary) token(user string) string { return a.cp.tokens[user] }

// recordsOf is the NodeRecords resource as user.
func (a *adversary) recordsOf(user string) dynamic.NamespaceableResourceInterface {
	return a.cp.recordsAs(a.token(user))
}

// quietClient is a dynamic client with token's identity that prints no
// warnings (a managedFields write draws one each).
func (a *adversary) quietClient(token string) dynamic.Interface {
	cfg := a.cp.apiClientConfig(token)
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		a.t.Fatal(err)
	}
	return c
}

// publishHonestly has each honest node claim its pods with its own
// credentials, and evil its own; then the honest pods with a name identity
// are deleted, their entries now reservations: the moment the hint
// matters (a pod of that name is created again). The keyed identities'
// pods keep running (a new pod with the key is not one of that name).
func (a *adversary) publishHonestly() {
	t, cp := a.t, a.cp
	ips := 2
	for i, v := range advVictims[:2] {
		var entries []placementv1.Entry
		for k := range 3 {
			pod := fmt.Sprintf("db%d-%d", i, k)
			a.createPod(advNS, pod, v, nil)
			entries = append(entries, cp.podEntry(advNS, pod, pod, fmt.Sprintf("10.244.%d.%d", i+1, ips)))
			a.want[pod] = v
			ips++
		}
		key := []string{"queue", "cache"}[i]
		pod := key + "-7d9f8-" + strconv.Itoa(i)
		a.createPod(advNS, pod, v, map[string]string{annIdentity: key})
		entries = append(entries, cp.podEntry(advNS, "identity:"+key, pod, fmt.Sprintf("10.244.%d.%d", i+1, ips)))
		a.want["identity:"+key] = v
		if err := cp.writeEntriesAs(v, nil, entries...); err != nil {
			t.Fatalf("%s publishing its entries: %v", v, err)
		}
	}
	for k := range 4 {
		pod := fmt.Sprintf("ev-%d", k)
		a.createPod(advNS, pod, advEvil, nil)
		a.evilPods = append(a.evilPods, pod)
		a.evilBase = append(a.evilBase, cp.podEntry(advNS, pod, pod, fmt.Sprintf("10.244.9.%d", k+2)))
	}
	if err := cp.writeEntriesAs(advEvil, nil, a.evilBase...); err != nil {
		t.Fatalf("evil publishing its own pods: %v", err)
	}
	a.evilBase = cp.recordOf(advEvil).Spec.Entries
	eventually(t, "the honest and evil's entries indexed", time.Minute, 100*time.Millisecond, func() (bool, string) {
		if bad := a.intact(); bad != "" {
			return false, bad
		}
		return a.evilIndexed(), "evil's pods not indexed yet"
	})
	// The pods of name identities go; their entries become reservations.
	until := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	for _, v := range advVictims[:2] {
		var entries []placementv1.Entry
		for _, e := range cp.recordOf(v).Spec.Entries {
			if !strings.HasPrefix(e.Identity, "identity:") {
				a.deletePod(advNS, e.Pod)
				e.Until = &until
			}
			entries = append(entries, e)
		}
		if err := cp.writeEntriesAs(v, nil, entries...); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the honest reservations judged", time.Minute, 100*time.Millisecond, func() (bool, string) {
		for _, v := range advVictims[:2] {
			if r := cp.recordOf(v); r.Status.ObservedGeneration != r.Generation {
				return false, v + "'s record not judged yet"
			}
		}
		return true, ""
	})
	a.check("the honest nodes' reservations")
	t.Logf("adversary: honest index %s; evil's pods %v", identitiesIn(cp.indexIn(advNS)), a.evilPods)
}

// createPod creates pod ns/name bound to node (nothing runs it).
func (a *adversary) createPod(ns, name, node string, annotations map[string]string) *corev1.Pod {
	a.t.Helper()
	p := testPod(name, annotations)
	p.Namespace, p.Spec.NodeName = ns, node
	got, err := a.cp.client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return got
}

// deletePod deletes pod ns/name at once and waits until it is gone.
func (a *adversary) deletePod(ns, name string) {
	a.t.Helper()
	ctx := context.Background()
	zero := int64(0)
	if err := a.cp.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		a.t.Fatal(err)
	}
	eventually(a.t, "pod "+ns+"/"+name+" gone", time.Minute, 100*time.Millisecond, func() (bool, string) {
		_, err := a.cp.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// intact says what of the honest index is not as published ("" when all
// is): each honest identity indexed for its node, the node's claim
// accepted and indexed.
func (a *adversary) intact() string {
	index := a.cp.indexIn(advNS)
	for _, id := range slices.Sorted(mapsKeys(a.want)) {
		v := a.want[id]
		if index[id] != v {
			return fmt.Sprintf("%s: the index gives it to %q, want %s (index %s)", id, index[id], v, identitiesIn(index))
		}
		if c := a.cp.claimOf(v, advNS, id); c == nil || !c.Accepted() || !c.Indexed {
			return fmt.Sprintf("%s: %s's claim %+v, want accepted and indexed", id, v, c)
		}
	}
	return ""
}

// evilIndexed reports whether evil's own pods are indexed for it.
func (a *adversary) evilIndexed() bool {
	index := a.cp.indexIn(advNS)
	for _, p := range a.evilPods {
		if index[p] != advEvil {
			return false
		}
	}
	return true
}

// check fails the test unless the honest index is intact and the hint
// itself — a server-side dry run of each honest identity's pod created
// again — names the honest node (but for the identities except, whose
// name a pod holds).
func (a *adversary) check(after string, except ...string) {
	a.t.Helper()
	if bad := a.intact(); bad != "" {
		a.t.Fatalf("after %s: %s", after, bad)
	}
	for _, id := range slices.Sorted(mapsKeys(a.want)) {
		if slices.Contains(except, id) {
			continue
		}
		if got := a.hinted(advNS, id); got != a.want[id] {
			a.t.Fatalf("after %s: a re-created pod of %s is sent to %q, want %s", after, id, got, a.want[id])
		}
	}
}

// hinted names the node the hint gives a new pod of identity in ns: a
// server-side dry-run creation, nothing stored ("" for none).
func (a *adversary) hinted(ns, identity string) string {
	a.t.Helper()
	p := unboundPod(ns, identity, map[string]string{annReservation: "10m"})
	if key, ok := strings.CutPrefix(identity, "identity:"); ok {
		p = unboundPod(ns, "", map[string]string{annReservation: "10m", annIdentity: key})
	}
	got, err := a.cp.client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		a.t.Fatalf("dry-run creation of a pod of %s/%s: %v", ns, identity, err)
	}
	for _, node := range slices.Concat(advVictims, []string{advEvil}, advGone, longNodes) {
		if hasOnly(got, node, false) {
			return node
		}
	}
	if got.Spec.Affinity != nil {
		return fmt.Sprintf("an affinity of no node's: %v", got.Spec.Affinity)
	}
	return ""
}

// settleEvil waits until the controller has judged evil's record as it is
// now: its verdicts answer the record's generation, or, under a Node UID
// that is not evil's, none of its pods is indexed.
func (a *adversary) settleEvil() {
	a.t.Helper()
	eventually(a.t, "the controller's judgement of evil's record", time.Minute, 50*time.Millisecond, func() (bool, string) {
		r := a.cp.recordOf(advEvil)
		switch {
		case r == nil:
			return !slices.ContainsFunc(a.evilPods, func(p string) bool { return a.cp.hinted(advNS, p) == advEvil }), "no record, its pods still indexed"
		case r.Spec.NodeUID != a.uids[advEvil]:
			return !slices.ContainsFunc(a.evilPods, func(p string) bool { return a.cp.hinted(advNS, p) == advEvil }),
				"its record under another Node UID, its pods still indexed"
		}
		return r.Status.ObservedGeneration == r.Generation && r.Status.NodeUID == r.Spec.NodeUID,
			fmt.Sprintf("generation %d judged %d", r.Generation, r.Status.ObservedGeneration)
	})
}

// restoreEvil makes evil's record its honest one again, with its own
// credentials (creating it when it is gone): its base entries, no labels,
// annotations, references, finalizers, and no managedFields beyond its
// write's; and waits until its pods are indexed again.
func (a *adversary) restoreEvil() {
	a.t.Helper()
	a.resetEvil()
	a.settleEvil()
	eventually(a.t, "evil's pods indexed again", time.Minute, 100*time.Millisecond, func() (bool, string) {
		return a.evilIndexed(), identitiesIn(a.cp.indexIn(advNS))
	})
}

// resetEvil is restoreEvil without waiting for the controller: between the
// paths of a control, which the controller's answer does not change.
func (a *adversary) resetEvil() {
	a.t.Helper()
	ctx := context.Background()
	r := a.recordsOf(nodeUser(advEvil))
	base := recordObject(advEvil, string(a.uids[advEvil]), a.evilBase...)
	eventually(a.t, "evil's record restored", time.Minute, 100*time.Millisecond, func() (bool, string) {
		cur, err := a.admin.Get(ctx, advEvil, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = r.Create(ctx, base, metav1.CreateOptions{})
			return false, fmt.Sprint("created: ", err)
		}
		if err != nil {
			return false, err.Error()
		}
		if cur.GetDeletionTimestamp() != nil {
			return false, "being deleted"
		}
		mf, _ := json.Marshal(cur.GetManagedFields())
		if string(bare(cur)) == string(bare(base)) && len(mf) < 4<<10 {
			return true, ""
		}
		spec, _ := base.Object["spec"].(map[string]any)
		patch := map[string]any{"metadata": map[string]any{"labels": nil, "annotations": nil, "ownerReferences": nil, "finalizers": nil,
			"managedFields": []any{map[string]any{}}}, "spec": spec}
		body, _ := json.Marshal(patch)
		_, err = r.Patch(ctx, advEvil, types.MergePatchType, body, metav1.PatchOptions{})
		return false, fmt.Sprint("patched: ", err)
	})
}

// advSeed is the random phase's seed: E2E_ADVERSARY_SEED, else the clock.
func advSeed() uint64 {
	if s := os.Getenv("E2E_ADVERSARY_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return uint64(time.Now().UnixNano())
}

// mapsKeys ranges over m's keys.
func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
