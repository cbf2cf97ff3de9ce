//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness"
)

// The adversary of issues 38 and 47, against a real kube-apiserver
// (Node,RBAC, NodeRestriction) with deploy/placement and a
// kube-controller-manager (whose garbage collector answers every reference
// a write leaves): two honest nodes publish their StatefulSet pods'
// reservations with the real publisher; a compromised node ("evil", running
// pods of its own in the namespace), a namespace user with every ConfigMap
// right and a member of system:nodes that is no node then write at random,
// on every write path, every field they can reach, while other nodes own
// shards and are deleted (background and orphan). After each accepted write
// (and the collector's answer to it, seen in the audit log when the write
// gave it something to do) every honest entry must still count, the
// placement hint itself (a dry run of the pod's creation) must still name
// its node, no two references share a UID and no shard outgrows its
// entries; at the end the honest nodes' writes must still land. The random
// writes are a function of the seed alone (advPlan): a seed replays them.
const (
	advNS      = "adv"
	advFirstNS = "adv-first" // where victim-1 writes for the first time while evil holds its UID
	advEvil    = "evil"
	advFake    = "mallory" // in system:nodes, not system:node:<name>
	advWrites  = 1500      // E2E_ADVERSARY_WRITES overrides
)

var (
	advVictims = []string{"victim-1", "victim-2"}
	// advGone are the nodes deleted during the run: each owns shards
	// (spawn), then its Node is deleted (deleteNode).
	advGone = []string{"gone-0", "gone-1", "gone-2", "gone-3"}
	// advT0 is the ADD time of every line the adversary writes: no clock in
	// what a seed replays.
	advT0 = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
)

func TestPlacementAdversary(t *testing.T) {
	bins := findBins(t)
	bins.require(t, "kube-controller-manager")
	netns, h := newNetns(t, "adv")
	cp := newControlPlane(t, bins, harness.ShortTempDir(t), testLogDir(t), netns, h, "127.0.0.1", slices.Concat(advVictims, []string{advEvil}, advGone)...)
	cp.addUser(advFake, "system:nodes")
	cp.startControlPlane()
	cp.startControllerManager()
	cp.applyPlacement()
	a := newAdversary(t, cp)
	a.publishHonestly()
	for _, rc := range slices.Concat(advRegressions, advRegressions47) {
		t.Run(rc.name, func(t *testing.T) { a.t = t; rc.run(a); a.check(rc.name, nil) })
	}
	a.t = t
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("E2E_ADVERSARY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	n := advWrites
	if s := os.Getenv("E2E_ADVERSARY_WRITES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	a.random(seed, n)
	a.honestStillWrite()
}

// addUser adds a token-file user with groups (comma-separated) before the
// API server starts.
func (cp *controlPlane) addUser(user, groups string) {
	tok := randomToken(cp.t)
	cp.tokens[user] = tok
	path := filepath.Join(cp.pki(), "tokens.csv")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s,%s,%s,\"%s\"\n", tok, user, user, groups); err != nil {
		cp.t.Fatal(err)
	}
}

type adversary struct {
	t         *testing.T
	cp        *controlPlane
	uids      map[string]types.UID // Node UIDs
	evil      kubernetes.Interface
	editor    kubernetes.Interface
	fake      kubernetes.Interface
	stores    map[string]*burstStore
	want      map[string]string            // each honest identity's node
	evilPods  []string                     // pods bound to evil: one per shard
	evilIn    map[string]map[string]string // namespace → shard → a pod bound to evil there
	cancel    context.CancelFunc
	accepted  []string // what the adversary got through, for the report
	probes    int
	spawned   int // nodes spawned
	deletions int
}

func newAdversary(t *testing.T, cp *controlPlane) *adversary {
	ctx := context.Background()
	a := &adversary{t: t, cp: cp, uids: map[string]types.UID{}, stores: map[string]*burstStore{}, want: map[string]string{},
		evilIn: map[string]map[string]string{}}
	for _, n := range append(slices.Clone(advVictims), advEvil) {
		nd, err := cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.uids[n] = nd.UID
	}
	cp.ensureNamespace(advNS)
	cp.ensureNamespace(advFirstNS)
	quiet := func(token string) kubernetes.Interface { // the adversary's duplicate references draw a warning each
		cfg := cp.apiClientConfig(token)
		cfg.WarningHandler = rest.NoWarnings{}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a.evil = quiet(cp.tokens[nodeUser(advEvil)])
	a.fake = quiet(cp.tokens[advFake])
	a.editor = cp.namespaceEditor(advNS)
	return a
}

// publishHonestly has each honest node's publisher claim its pods (bound to
// it), then the pods deleted, their IPs reserved: the moment the hint
// matters. evil claims a pod of its own in every shard.
func (a *adversary) publishHonestly() {
	t, cp := a.t, a.cp
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	t.Cleanup(cancel)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, v := range advVictims {
		st := &burstStore{}
		for k := range 8 {
			pod := fmt.Sprintf("db%d-%d", i, k)
			p := testPod(pod, nil)
			p.Namespace, p.Spec.NodeName = advNS, v
			if _, err := cp.client.CoreV1().Pods(advNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			a.want[pod] = v
			st.entries = append(st.entries, advEntry(pod, fmt.Sprintf("10.244.%d.%d", i+1, k+2), now, time.Time{}))
		}
		a.stores[v] = st
		p, err := placement.New(cp.apiClientConfig(cp.tokens[nodeUser(v)]), placement.Options{Node: v, Store: st, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		go p.Run(ctx)
	}
	for _, ns := range []string{advNS, advFirstNS} {
		a.evilIn[ns] = map[string]string{}
		for i := 0; len(a.evilIn[ns]) < placement.ShardCount; i++ {
			pod := fmt.Sprintf("ev-%d", i)
			if a.evilIn[ns][placement.ShardOf(pod)] != "" {
				continue
			}
			a.evilIn[ns][placement.ShardOf(pod)] = pod
			p := testPod(pod, nil)
			p.Namespace, p.Spec.NodeName = ns, advEvil
			if _, err := cp.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if ns == advNS {
				a.evilPods = append(a.evilPods, pod)
			}
		}
	}
	eventually(t, "honest entries published", time.Minute, 200*time.Millisecond, func() (bool, string) { return a.intact() == "", a.intact() })
	w := cp.indexWriterFor(advEvil)
	for _, pod := range a.evilPods {
		if err := w.claim(advNS, entryLine(pod, pod, "10.244.9.9")); err != nil {
			t.Fatalf("evil claiming its own pod %s: %v", pod, err)
		}
	}
	zero := int64(0)
	for pod := range a.want {
		if err := cp.client.CoreV1().Pods(advNS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	until := now.Add(time.Hour)
	for _, st := range a.stores {
		st.set(func(e *reservation.Entry) { e.State, e.ExpiresAt, e.ContainerID = reservation.Reserved, until, "" })
	}
	eventually(t, "honest reservations published", time.Minute, 200*time.Millisecond, func() (bool, string) {
		for pod, v := range a.want {
			if l, ok := cp.lineOf(advNS, pod, v); !ok || l.Running() {
				return false, pod + " still running"
			}
			if _, err := cp.client.CoreV1().Pods(advNS).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, pod + " not gone"
			}
		}
		return true, ""
	})
	a.check("baseline", nil)
}

func advEntry(pod, ip string, at, until time.Time) reservation.Entry {
	e := reservation.Entry{Network: "cbr0", Record: &reservation.Record{
		IP: mustAddr(ip), State: reservation.Allocated, ContainerID: "sb-" + pod, IfName: "eth0",
		Identity: reservation.Identity{Namespace: advNS, Name: pod, IfName: "eth0"}, PodName: pod,
		Duration: time.Hour, AllocatedAt: at}}
	if !until.IsZero() {
		e.State, e.ExpiresAt, e.ContainerID = reservation.Reserved, until, ""
	}
	return e
}

// advOverhead bounds what a shard holds beyond its values: metadata (its
// references, label, the collector's record of what it removed) and what
// an administrator's write left in managedFields.
const advOverhead = 16 << 10

// intact says what of the honest index is not as published ("" when all
// is): each honest identity listed by its node, which owns the shard under
// its own Node's UID, and named by the hint (read as the hint reads the
// index); in every shard, no two references sharing a UID (the garbage
// collector removes references by UID) and nothing beyond its values but
// advOverhead.
func (a *adversary) intact() string {
	for _, ns := range []string{advNS, advFirstNS} {
		l, err := a.cp.client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: placement.IndexLabel})
		if err != nil {
			return err.Error()
		}
		for _, cm := range l.Items {
			uids := map[types.UID]string{}
			for _, r := range cm.OwnerReferences {
				if o, dup := uids[r.UID]; dup {
					return fmt.Sprintf("%s/%s: the references of %s and %s share the UID %s", ns, cm.Name, o, r.Name, r.UID)
				}
				uids[r.UID] = r.Name
			}
			if size, values := shardSize(&cm); size > values+advOverhead {
				return fmt.Sprintf("%s/%s: %d bytes for %d bytes of values (managedFields %d bytes)", ns, cm.Name, size, values, managedSize(&cm))
			}
		}
	}
	shards := a.cp.shardsIn(advNS)
	for pod, v := range a.want {
		s := shards[advNS+"/"+placement.ShardOf(pod)]
		if s == nil {
			return pod + ": its shard is gone"
		}
		lines, _ := s.Lines(v)
		if !slices.ContainsFunc(lines, func(l placement.Line) bool { return l.Identity == pod }) {
			return fmt.Sprintf("%s: %s's entry is gone", pod, v)
		}
		if !slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool {
			return r.Kind == "Node" && r.APIVersion == "v1" && r.Name == v && r.UID == a.uids[v]
		}) {
			return fmt.Sprintf("%s: %s's reference is gone", pod, v)
		}
		if got := hintedIn(s, pod); got != v {
			return fmt.Sprintf("%s: the index names %q, want %s", pod, got, v)
		}
	}
	return ""
}

// check fails the test unless the honest index is intact, after the
// garbage collector has answered (settle), and unless the placement
// policy's own answer (a server-side dry run of the pod's creation) names
// the honest node of every honest identity in shards (nil: every shard).
func (a *adversary) check(after string, shards []string) {
	a.t.Helper()
	a.settle()
	if bad := a.intact(); bad != "" {
		a.t.Fatalf("after %s: %s\naccepted adversary writes so far:\n%s", after, bad, strings.Join(a.accepted, "\n"))
	}
	for _, pod := range slices.Sorted(mapsKeys(a.want)) {
		v := a.want[pod]
		if shards != nil && !slices.Contains(shards, placement.ShardOf(pod)) {
			continue
		}
		p := unboundPod(advNS, pod, map[string]string{annReservation: "10"})
		got, err := a.cp.client.CoreV1().Pods(advNS).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			a.t.Fatalf("after %s: dry-run creation of %s: %v", after, pod, err)
		}
		if !hasOnly(got, v, false) {
			a.t.Fatalf("after %s: a re-created %s gets %v, want the hint for %s\naccepted adversary writes:\n%s", after, pod,
				got.Spec.Affinity, v, strings.Join(a.accepted, "\n"))
		}
	}
}

// settle waits until the garbage collector has processed what came before:
// a ConfigMap owned by a Node that does not exist, made now, is deleted by
// it after the events before it.
func (a *adversary) settle() {
	a.probes++
	ctx := context.Background()
	name := fmt.Sprintf("gc-probe-%d", a.probes)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "no-such-node-" + name, UID: uuid.NewUUID()}}}}
	if _, err := a.cp.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	eventually(a.t, "the garbage collector's answer", time.Minute, 100*time.Millisecond, func() (bool, string) {
		_, err := a.cp.client.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// write tries mutate of shard name by every path in paths, as c; it
// returns which paths were accepted and changed the shard.
func (a *adversary) write(c kubernetes.Interface, name string, mutate func(*corev1.ConfigMap), paths []string) []string {
	ctx := context.Background()
	cur, err := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	all := writePaths(c, cur, mutate)
	var changed []string
	for _, p := range paths {
		before, _ := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, name, metav1.GetOptions{})
		if err := all[p](); err != nil {
			continue
		}
		after, _ := a.cp.client.CoreV1().ConfigMaps(advNS).Get(ctx, name, metav1.GetOptions{})
		if before.ResourceVersion != after.ResourceVersion {
			changed = append(changed, p)
		}
	}
	return changed
}

// honestStillWrite: every honest node's next change lands (no write of the
// adversary froze it).
func (a *adversary) honestStillWrite() {
	a.t.Helper()
	until := time.Now().UTC().Add(2 * time.Hour).Add(time.Duration(a.probes) * time.Second).Truncate(time.Millisecond)
	for _, st := range a.stores {
		st.set(func(e *reservation.Entry) { e.ExpiresAt = until })
	}
	eventually(a.t, "the honest nodes' next writes", time.Minute, 200*time.Millisecond, func() (bool, string) {
		for pod, v := range a.want {
			if l, ok := a.cp.lineOf(advNS, pod, v); !ok || !l.Until.Equal(until) {
				return false, fmt.Sprintf("%s of %s: %+v", pod, v, l)
			}
		}
		return true, ""
	})
	a.check("the honest nodes' last writes", nil)
}

// shardOf returns the shard of an honest identity picked by r.
func (a *adversary) pickShard(r *rand.Rand) (string, string) {
	ids := slices.Sorted(mapsKeys(a.want))
	id := ids[r.IntN(len(ids))]
	return placement.ShardOf(id), id
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// hintedIn names the node the hint picks for identity in shard s, read as
// the hint reads it: of the owners listing it with a seq the index policy
// could have checked (at most the shard's resourceVersion), the one with the
// largest seq; "" when none.
func hintedIn(s *placement.Shard, identity string) string {
	best, seq := "", uint64(0)
	for n, l := range s.Others("", identity) {
		if best == "" || l.Seq > seq {
			best, seq = n, l.Seq
		}
	}
	return best
}

// jsonOf renders v for the report.
func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// shardSize is the size of cm as the API server stores it (its JSON), and
// that of its values.
func shardSize(cm *corev1.ConfigMap) (size, values int) {
	b, _ := json.Marshal(cm)
	for k, v := range cm.Data {
		values += len(k) + len(v)
	}
	return len(b), values
}

// managedSize is the size of cm's managedFields (their JSON).
func managedSize(cm *corev1.ConfigMap) int {
	b, _ := json.Marshal(cm.ManagedFields)
	return len(b)
}
