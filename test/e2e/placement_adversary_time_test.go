//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// advLatency bounds how long an honest node's claim, update or release
// takes to land (its write taken and the controller's answer in the index
// or the record's status) whatever evil does.
const advLatency = 2 * time.Second

// advGoneWithin bounds how long a deleted Node's entries stay in the index.
const advGoneWithin = 10 * time.Second

// lifecycle is what an honest node's claim, update and release of one pod
// took: its write (the API server's answer) and until it landed.
type lifecycle struct{ write, landed [3]time.Duration }

func (l lifecycle) String() string {
	ms := func(d time.Duration) string { return fmt.Sprint(d.Round(time.Millisecond)) }
	return fmt.Sprintf("claim %s/%s, update %s/%s, release %s/%s", ms(l.write[0]), ms(l.landed[0]), ms(l.write[1]), ms(l.landed[1]), ms(l.write[2]), ms(l.landed[2]))
}

// honestLifecycle has node claim a new pod of its own (lat-<i>), write its
// reservation's end and release it, each with its own credentials as its
// checkpointd writes (a merge patch of the spec), each timed from the
// write to its effect: the index naming node, the controller's verdict on
// the record's generation, the identity out of the index.
func (a *adversary) honestLifecycle(node string, i int) lifecycle {
	t := a.t
	t.Helper()
	ctx := context.Background()
	pod := fmt.Sprintf("lat-%d", i)
	p := a.createPod(advNS, pod, node, nil)
	r := a.recordsOf(nodeUser(node))
	base := a.cp.recordOf(node).Spec
	write := func(entries []placementv1.Entry) time.Duration {
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeUID": base.NodeUID, "entries": entries}})
		start := time.Now()
		if _, err := r.Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s writing its record: %v", node, err)
		}
		return time.Since(start)
	}
	var l lifecycle
	landed := func(k int, what string, start time.Time, cond func() bool) {
		eventually(t, node+" "+what+" "+pod, time.Minute, 20*time.Millisecond, func() (bool, string) { return cond(), "not yet" })
		l.landed[k] = time.Since(start)
	}
	e := recordEntry(advNS, pod, pod, string(p.UID), "10.244.2.200")
	start := time.Now()
	l.write[0] = write(append(slices.Clone(base.Entries), e))
	landed(0, "claiming", start, func() bool { return a.cp.hinted(advNS, pod) == node })
	until := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
	e.Until = &until
	start = time.Now()
	l.write[1] = write(append(slices.Clone(base.Entries), e))
	landed(1, "writing the reservation's end of", start, func() bool {
		rec := a.cp.recordOf(node)
		return rec.Status.ObservedGeneration == rec.Generation
	})
	start = time.Now()
	l.write[2] = write(base.Entries)
	landed(2, "releasing", start, func() bool { return a.cp.hinted(advNS, pod) == "" })
	a.deletePod(advNS, pod)
	return l
}

// lifecycles runs n honest lifecycles (victim-2's) and fails the test if
// any step took longer than advLatency; it returns their median landings.
func (a *adversary) lifecycles(what string, first, n int) [3]time.Duration {
	a.t.Helper()
	var ls []lifecycle
	for i := range n {
		l := a.honestLifecycle(advVictims[1], first+i)
		a.t.Logf("%s: victim-2's lifecycle %d (write/landed): %s", what, i, l)
		for k, d := range l.landed {
			if d > advLatency {
				a.t.Errorf("%s: victim-2's %s took %v, want at most %v", what, []string{"claim", "update", "release"}[k], d, advLatency)
			}
		}
		ls = append(ls, l)
	}
	var med [3]time.Duration
	for k := range med {
		var ds []time.Duration
		for _, l := range ls {
			ds = append(ds, l.landed[k])
		}
		slices.Sort(ds)
		med[k] = ds[len(ds)/2]
	}
	return med
}

// hammer runs write in n goroutines, each as fast as the API server
// answers, until the returned stop is called; stop returns how many
// writes were made and how many were taken.
func hammer(n int, write func(i int) error) (stop func() (tried, took int64)) {
	var tried, took int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				atomic.AddInt64(&tried, 1)
				if write(g*1_000_000+i) == nil {
					atomic.AddInt64(&took, 1)
				}
			}
		}()
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return atomic.LoadInt64(&tried), atomic.LoadInt64(&took)
	}
}

// evilCommits returns a write of evil's own record, entries (the base
// and extra) with an end that differs at every call: a new generation the
// controller judges again.
func (a *adversary) evilCommits(extra []placementv1.Entry) func(i int) error {
	r := a.recordsOf(nodeUser(advEvil))
	return func(i int) error {
		entries := slices.Clone(a.evilBase)
		until := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second))
		entries[0].Until = &until
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeUID": a.uids[advEvil], "entries": append(entries, extra...)}})
		_, err := r.Patch(context.Background(), advEvil, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
}

// bigEntries are n entries of the longest form the CRD takes, for pods
// that do not exist: about 700 bytes each.
func bigEntries(n int) []placementv1.Entry {
	out := make([]placementv1.Entry, n)
	for i := range out {
		id := longIdentity("big", i)
		e := recordEntry(advNS, "identity:"+id, id, fmt.Sprintf("00000000-0000-4000-8000-%012d", i), addresses(8)...)
		out[i] = e
	}
	return out
}

// longIdentity is a stickyip.io/identity of 253 characters (a DNS
// subdomain of four labels), distinct for each i.
func longIdentity(prefix string, i int) string {
	label := strings.Repeat("x", 63)
	last := fmt.Sprintf("%s-%d-", prefix, i)
	return label + "." + label + "." + label + "." + last + strings.Repeat("y", 61-len(last))
}

// advStarvation: the largest record of evil's own (placementv1.MaxEntries
// entries of the longest fields) is taken and slows no honest write: victim-2's lifecycles (claim, update, release) are timed without
// it and with it, each landing within advLatency and their medians within
// advSlower of those without. Then evil commits to its own record as fast
// as the API server answers while victim-2's lifecycles are timed again,
// each within advLatency.
func (a *adversary) advStarvation() {
	t := a.t
	ctx := context.Background()
	const n = 5
	without := a.lifecycles("without evil's largest record", 0, n)
	big := bigEntries(placementv1.MaxEntries - len(a.evilBase))
	requireAccepted(t, fmt.Sprintf("evil's own record of %d entries of the longest fields", len(big)+len(a.evilBase)), a.evilCommits(big)(0))
	u, err := a.admin.Get(ctx, advEvil, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	size, _ := json.Marshal(u.Object)
	t.Logf("evil's own record: %d entries, %d bytes", len(big)+len(a.evilBase), len(size))
	if got, _, _ := unstructured.NestedSlice(u.Object, "spec", "entries"); len(got) != placementv1.MaxEntries {
		t.Fatalf("evil's record holds %d entries, want the largest the schema takes (%d)", len(got), placementv1.MaxEntries)
	}
	a.settleEvil()
	with := a.lifecycles("with evil's largest record", n, n)
	for k := range with {
		if with[k] > 2*without[k]+advSlower {
			t.Errorf("victim-2's median %s with evil's largest record %v, without %v: slower", []string{"claim", "update", "release"}[k], with[k], without[k])
		}
	}
	a.restoreEvil()
	stop := hammer(4, a.evilCommits(nil))
	started := time.Now()
	flooded := a.lifecycles("evil committing to its own record as fast as the API server answers", 2*n, n)
	tried, took := stop()
	t.Logf("honest medians (claim, update, release): without evil's largest record %v, with it %v, under evil's flood of commits %v; evil's commits meanwhile: %d tried, %d taken (%.0f/s)",
		without, with, flooded, tried, took, float64(took)/time.Since(started).Seconds())
	if took == 0 {
		t.Fatal("evil's flood took no write: it proves nothing")
	}
	a.restoreEvil()
}

// advSlower is how much slower than twice the median without evil's 1 MiB
// record an honest median may be with it (a loaded machine's noise).
const advSlower = 250 * time.Millisecond

// advDeletions: Nodes deleted (background, orphaning, foreground) while
// evil commits to its own record as fast as the API server answers and
// writes the doomed node's record (refused): each Node's entries leave
// the index within advGoneWithin, the controller's shard write that takes
// them out in the audit log (the control that it acted on the deletion),
// the honest ones stay. Two deletions carry what evil can hang on a Node:
// a dependent of it that blocks its foreground deletion (evil's own Lease,
// which NodeRestriction lets it give any owner reference and finalizer),
// and a finalizer (through its minted flannel token's nodes/status).
func (a *adversary) advDeletions() {
	t := a.t
	ctx := context.Background()
	tok := a.mintFlannelToken()
	for k, c := range []struct {
		policy metav1.DeletionPropagation
		hang   string
	}{
		{metav1.DeletePropagationBackground, ""},
		{metav1.DeletePropagationOrphan, ""},
		{metav1.DeletePropagationForeground, "evil's Lease, owned by the Node (blockOwnerDeletion), with a finalizer"},
		{metav1.DeletePropagationBackground, "a finalizer on the Node from evil's minted flannel token"},
	} {
		name := advGone[k]
		nd, err := a.cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.uids[name] = nd.UID
		var ids []string
		for i := range 2 {
			pod := fmt.Sprintf("g%d-%d", k, i)
			a.createPod(advNS, pod, name, nil)
			if err := a.cp.claimAs(name, a.cp.podEntry(advNS, pod, pod, fmt.Sprintf("10.244.8.%d", 10*k+i))); err != nil {
				t.Fatalf("%s claiming its pod %s: %v", name, pod, err)
			}
			ids = append(ids, pod)
		}
		t.Cleanup(func() { a.unhang(name, c.hang) })
		switch {
		case strings.HasPrefix(c.hang, "evil's Lease"):
			a.evilLeaseOwnedBy(name)
		case c.hang != "":
			_, err := a.cp.clientAs(tok).CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`),
				metav1.PatchOptions{}, "status")
			requireAccepted(t, "evil's minted flannel token putting a finalizer on Node "+name+" through nodes/status", err)
		}
		flood := a.recordsOf(nodeUser(advEvil))
		commit := a.evilCommits(nil)
		stop := hammer(4, func(i int) error {
			if i%2 == 0 {
				return commit(i)
			}
			_, err := flood.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"entries":[]}}`), metav1.PatchOptions{})
			return err
		})
		from := time.Now()
		if err := a.cp.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &c.policy}); err != nil {
			t.Fatal(err)
		}
		gone := a.pollGone(ids, from)
		tried, took := stop()
		what := fmt.Sprintf("Node %s deleted (%s%s)", name, c.policy, map[bool]string{true: ", " + c.hang}[c.hang != ""])
		if gone < 0 {
			nodeNow, _ := a.cp.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			t.Errorf("%s: its entries %v still in the index after %v (the Node: deletionTimestamp %v, finalizers %v); evil's writes meanwhile: %d, %d taken",
				what, ids, advGoneWithin, nodeNow.DeletionTimestamp, nodeNow.Finalizers, tried, took)
		} else {
			at := a.controllerRemoved(advNS, ids[0], from)
			t.Logf("%s: its entries out of the index after %v, the controller's shard write %v after the deletion (audit log); evil's writes meanwhile: %d (%d taken: its own record)",
				what, gone.Round(time.Millisecond), at.Round(time.Millisecond), tried, took)
		}
		if took == 0 {
			t.Errorf("%s: evil's flood took no write of its own record: it proves nothing", what)
		}
		a.unhang(name, c.hang)
		eventually(t, "Node "+name+" gone", time.Minute, 100*time.Millisecond, func() (bool, string) {
			n, err := a.cp.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			return false, fmt.Sprintf("finalizers %v (%v)", n.Finalizers, err)
		})
		eventually(t, name+"'s entries out of the index once the Node is gone", time.Minute, 100*time.Millisecond, func() (bool, string) {
			return a.pollGoneNow(ids), identitiesIn(a.cp.indexIn(advNS))
		})
		a.restoreEvil()
		a.check(what)
	}
}

// pollGone polls until none of ids is in advNS's index and returns how
// long after from that was; -1 when it was not within advGoneWithin.
func (a *adversary) pollGone(ids []string, from time.Time) time.Duration {
	for time.Since(from) < advGoneWithin {
		if a.pollGoneNow(ids) {
			return time.Since(from)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func (a *adversary) pollGoneNow(ids []string) bool {
	index := a.cp.indexIn(advNS)
	return !slices.ContainsFunc(ids, func(id string) bool { _, ok := index[id]; return ok })
}

// evilLeaseOwnedBy has evil give its own Lease (kube-node-lease/evil,
// which only it may write) an owner reference to Node owner that blocks
// the owner's foreground deletion, and a finalizer that keeps the Lease
// when the garbage collector deletes it.
func (a *adversary) evilLeaseOwnedBy(owner string) {
	t := a.t
	ctx := context.Background()
	leases := a.cp.clientAs(a.token(nodeUser(advEvil))).CoordinationV1().Leases(corev1.NamespaceNodeLease)
	yes := true
	holder := advEvil
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: advEvil, Namespace: corev1.NamespaceNodeLease,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: owner, UID: a.uids[owner], BlockOwnerDeletion: &yes}},
		Finalizers:      []string{"example.com/hold"}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	cur, err := leases.Get(ctx, advEvil, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.ResourceVersion = cur.ResourceVersion
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	requireAccepted(t, "evil giving its own Lease an owner reference to Node "+owner+" (blockOwnerDeletion) and a finalizer", err)
}

// unhang removes, as admin, what evil hung on Node name.
func (a *adversary) unhang(name, hang string) {
	ctx := context.Background()
	switch {
	case strings.HasPrefix(hang, "evil's Lease"):
		if _, err := a.cp.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, advEvil, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null,"ownerReferences":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			a.t.Fatal(err)
		}
	case hang != "":
		if _, err := a.cp.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil &&
			!apierrors.IsNotFound(err) {
			a.t.Fatal(err)
		}
	}
}

// controllerRemoved waits until the audit log shows the controller's
// write of a shard of ns, after from, that removes identity, and returns
// how long after from the API server answered it.
func (a *adversary) controllerRemoved(ns, identity string, from time.Time) time.Duration {
	a.t.Helper()
	var at time.Duration
	series, key := placementv1.ShardKey(identity)
	eventually(a.t, "the controller's shard write removing "+ns+"/"+identity+" (audit log)", 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		for _, w := range a.cp.controllerShardWrites(ns, from) {
			if s, _, ok := placementv1.ParseShardName(w.Name); ok && s == series && w.Code < 300 && strings.Contains(w.Body, fmt.Sprintf("%q:null", key)) {
				at = w.At.Sub(from)
				return true, ""
			}
		}
		return false, "none yet"
	})
	return at
}

// shardWrite is one write of stickyip-controller to a shard (a ConfigMap),
// as the audit log has it.
type shardWrite struct {
	Verb, Name string
	Code       int
	Body       string
	At         time.Time
}

// controllerShardWrites returns stickyip-controller's writes of the shards
// of ns that the API server answered at or after from (the audit policy
// logs them with their body).
func (cp *controlPlane) controllerShardWrites(ns string, from time.Time) []shardWrite {
	cp.t.Helper()
	f, err := os.Open(cp.auditLogPath())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	var out []shardWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"configmaps"`) {
			continue
		}
		var ev struct {
			Verb  string `json:"verb"`
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestObject json.RawMessage `json:"requestObject"`
			At            time.Time       `json:"stageTimestamp"`
		}
		if json.Unmarshal(line, &ev) != nil || ev.Stage != "ResponseComplete" || ev.User.Username != placementControllerUser ||
			ev.ObjectRef.Resource != "configmaps" || ev.ObjectRef.Namespace != ns || ev.At.Before(from) {
			continue
		}
		out = append(out, shardWrite{Verb: ev.Verb, Name: ev.ObjectRef.Name, Code: ev.ResponseStatus.Code, Body: string(ev.RequestObject), At: ev.At})
	}
	if err := sc.Err(); err != nil {
		cp.t.Fatalf("reading the audit log: %v", err)
	}
	return out
}

// longNodes are honest nodes of advLongNS only. Their names are short: a
// shard holds the more identities the shorter the node names, the worst
// case of its size (its managedFields list every identity again).
var longNodes = []string{"l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10"}

// advLongIdentities: an honest namespace of about 1 MiB of index, every
// identity a stickyip.io/identity of 253 characters, its pods spread on
// ten nodes, each node's record holding 375 of them (within a record's
// bound, placementv1.MaxEntries): the index holds
// them all (its time printed), and a new claim of such an identity
// reaches the index and the hint (a dry-run creation of a pod with the
// key names its node).
func (a *adversary) advLongIdentities() {
	t := a.t
	ctx := context.Background()
	const each = 375
	for _, n := range longNodes {
		nd, err := a.cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.uids[n] = nd.UID
	}
	// The pods are made as fast as the API server takes them (the tests'
	// clients are limited to 50 requests a second).
	cfg := a.cp.apiClientConfig(a.cp.adminToken)
	cfg.QPS, cfg.Burst = 2000, 2000
	fast, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	entries := make([][]placementv1.Entry, len(longNodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	var failed atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				node := i % len(longNodes)
				key := longIdentity("l", i)
				p := testPod(fmt.Sprintf("l-%d", i), map[string]string{annIdentity: key})
				p.Namespace, p.Spec.NodeName = advLongNS, longNodes[node]
				got, err := fast.CoreV1().Pods(advLongNS).Create(ctx, p, metav1.CreateOptions{})
				if err != nil {
					failed.Store(err)
					continue
				}
				e := recordEntry(advLongNS, "identity:"+key, got.Name, string(got.UID), fmt.Sprintf("10.%d.%d.%d", 100+node, i/250, i%250+1))
				mu.Lock()
				entries[node] = append(entries[node], e)
				mu.Unlock()
			}
		}()
	}
	for i := range each * len(longNodes) {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("creating %s's pods: %v", advLongNS, err)
	}
	made := time.Since(start)
	start = time.Now()
	for i, n := range longNodes {
		slices.SortFunc(entries[i], func(x, y placementv1.Entry) int { return strings.Compare(x.Identity, y.Identity) })
		if err := a.cp.writeEntriesAs(n, nil, entries[i]...); err != nil {
			t.Fatalf("%s publishing its %d entries: %v", n, len(entries[i]), err)
		}
	}
	written := time.Since(start)
	var shards []string
	bytes := 0
	eventually(t, "the 253-character identities indexed", time.Minute, 500*time.Millisecond, func() (bool, string) {
		l, err := a.cp.dynamicAs(a.cp.adminToken).Resource(indexGVR).Namespace(advLongNS).List(ctx, metav1.ListOptions{LabelSelector: placementv1.IndexLabel})
		if err != nil {
			return false, err.Error()
		}
		ids := 0
		shards, bytes = nil, 0
		for _, u := range l.Items {
			nodes, _, _ := unstructuredMap(u.Object, "data")
			ids += len(nodes)
			payload := 0 // the identities (identity:<key>) and their nodes: what the namespace holds
			for k, v := range nodes {
				payload += len(placementv1.ShardIdentity(u.GetLabels()[placementv1.IndexLabel], k)) + len(fmt.Sprint(v))
			}
			b, _ := json.Marshal(u.Object)
			mf, _ := json.Marshal(u.GetManagedFields())
			bytes += payload
			shards = append(shards, fmt.Sprintf("%s: %d identities, %d bytes of them, %d stored (managedFields %d)", u.GetName(), len(nodes), payload, len(b), len(mf)))
		}
		return ids == each*len(longNodes), fmt.Sprintf("%d of %d identities; shards %v", ids, each*len(longNodes), shards)
	})
	indexed := time.Since(start)
	t.Logf("%s: %d pods with 253-character identities made in %v; their nodes' records written in %v; all in the index %v after those writes: %d bytes of identities and nodes; shards %v",
		advLongNS, each*len(longNodes), made.Round(time.Millisecond), written.Round(time.Millisecond), indexed.Round(time.Millisecond), bytes, shards)
	if bytes < 1<<20-64<<10 {
		t.Errorf("%s's index holds %d bytes, want about 1 MiB", advLongNS, bytes)
	}
	// A new claim of a 253-character identity, and the hint for a pod of
	// it; and the hint for identities in each shard.
	key := longIdentity("new", 0)
	p := testPod("l-new", map[string]string{annIdentity: key})
	p.Namespace, p.Spec.NodeName = advLongNS, longNodes[0]
	got, err := a.cp.client.CoreV1().Pods(advLongNS).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the controller's verdicts on "+advLongNS+"'s records", time.Minute, 500*time.Millisecond, func() (bool, string) {
		for _, n := range longNodes {
			if r := a.cp.recordOf(n); r.Status.ObservedGeneration != r.Generation {
				return false, n + "'s not yet"
			}
		}
		return true, ""
	})
	// Timed by the hint itself (a dry-run creation of the identity's next
	// pod), polled: the record's and the index's megabytes are not read.
	e := recordEntry(advLongNS, "identity:"+key, got.Name, string(got.UID), "10.100.9.9")
	passes0, sync0 := a.cp.controllerPasses()
	start = time.Now()
	if err := a.cp.writeEntriesAs(longNodes[0], nil, e); err != nil {
		t.Fatalf("%s claiming a 253-character identity in %s: %v", longNodes[0], advLongNS, err)
	}
	eventually(t, "the hint for the new 253-character identity", time.Minute, 50*time.Millisecond, func() (bool, string) {
		h := a.hinted(advLongNS, "identity:"+key)
		return h == longNodes[0], fmt.Sprintf("it names %q", h)
	})
	claimed := time.Since(start)
	eventually(t, "the controller's verdict on "+longNodes[0]+"'s record", time.Minute, 100*time.Millisecond, func() (bool, string) {
		r := a.cp.recordOf(longNodes[0])
		return r.Status.ObservedGeneration == r.Generation, "not yet"
	})
	passes, sync := a.cp.controllerPasses()
	t.Logf("%s: a new claim of a 253-character identity reaches the hint (a dry-run creation of its next pod names %s) %v after its write; "+
		"the controller's passes until its verdict was written: %d, %v in all", advLongNS, longNodes[0], claimed.Round(time.Millisecond), passes-passes0, (sync - sync0).Round(time.Millisecond))
	for _, i := range []int{0, each*len(longNodes) - 1} {
		id := "identity:" + longIdentity("l", i)
		if got, want := a.hinted(advLongNS, id), longNodes[i%len(longNodes)]; got != want {
			t.Errorf("%s: the hint for identity l-%d (shard %s) names %q, want %s", advLongNS, i, a.shardOf(advLongNS, id), got, want)
		}
	}
}

// unstructuredMap is the map at fields of obj.
func unstructuredMap(obj map[string]any, fields ...string) (map[string]any, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[f]
	}
	m, ok := cur.(map[string]any)
	return m, ok, nil
}

// controllerPasses returns stickyip-controller's passes so far and the
// time they took (its metrics).
func (cp *controlPlane) controllerPasses() (int, time.Duration) {
	cp.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(cp.nsHandle)}}
	resp, err := c.Get("http://" + placementControllerAddr + "/metrics")
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	var passes int
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch {
		case strings.HasSuffix(f[0], "_passes_total"):
			v, _ := strconv.ParseFloat(f[1], 64)
			passes = int(v)
		case strings.HasSuffix(f[0], "_sync_seconds_sum"):
			sum, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return passes, time.Duration(sum * float64(time.Second))
}
