//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness"
)

// TestPlacementUpgrade moves a cluster running the previous release of
// placement — every node writes its entries into the shared ConfigMap
// shards stickyip-index-0 … -7 of each namespace, under the former index
// policy — to NodeRecords and stickyip-controller, by the steps of
// deploy/placement/README.md, with its entries: a running pod's, a
// reservation whose pod is gone (only the former line vouches for it), a
// keyed identity's, and an identity that moved from one node to another.
// The previous release is deploy/placement/former (its deploy/placement);
// its nodes are emulated by their lines, written with
// each node's own credentials as its publisher wrote them; the new
// checkpointd is the real publisher (checkpointd/placement) run with each
// node's credentials.
//
// "No window" at each step, as a user sees it:
//   - the hint: a pod created again for any identity of the index gets the
//     node that held it, before, during and after the upgrade — watched by
//     a dry-run creation of each identity's pod every 200 ms from the
//     previous release's index to the end, every other answer reported;
//     The hint switches from the former shards to the new ones (both
//     ConfigMaps) once every record is judged;
//   - the writes: a node writing what is not its own — another node's key
//     of a former shard, another node's record — as fast as the API server
//     answers, during every step, gets no write taken: the former index
//     policy or RBAC refuses the former shards' (the nodes' former grant
//     goes before that policy), RBAC or stickyip-node-records the
//     records' (the nodes' new grant only once the probe shows that policy
//     in effect); the control: the same writes taken on the writer's own
//     key, and on the record with the policy's binding removed;
//   - the end: the former shards, their policies and grants and the Node
//     annotation of the former publisher are gone, the controller no longer
//     reads the former shards (its --import-former-index is for the
//     upgrade only), and the index and the hint stay as they were across a
//     restart of the controller.
func TestPlacementUpgrade(t *testing.T) {
	bins := findBins(t)
	netns, h := newNetns(t, "upg")
	cp := newControlPlane(t, bins, harness.ShortTempDir(t), testLogDir(t), netns, h, "127.0.0.1", upNodes[0], upNodes[1], winNode, winVictim)
	start := time.Now()
	cp.startControlPlane()
	u := newUpgrade(t, cp)
	u.installPrevious()
	u.publishPrevious()
	u.formerControl()
	u.watchHints()
	steps := []struct {
		what string
		do   func()
	}{
		{"1. the placement API, the records' and the index's policies and stickyip-controller (--import-former-index) applied, the probe refused, deploy/placement/nodes applied", u.step1},
		{"2. the new checkpointd on every node, every record judged", u.step2},
		{"3. deploy/placement applied: the hint switches, the controller without --import-former-index", u.step3},
		{"4. the former grants, policies and shards deleted", u.step4},
	}
	for i, s := range steps {
		stepStart := time.Now()
		t.Logf("%s: begins at %s", s.what, stepStart.Format("15:04:05.000"))
		u.flood.start()
		stop, former := u.formerFlood()
		s.do()
		// Both floods go on for some writes after the step.
		r0, f0 := atomic.LoadInt64(&u.flood.tried), former()
		eventually(t, "the floods' writes after "+s.what, time.Minute, 20*time.Millisecond, func() (bool, string) {
			return atomic.LoadInt64(&u.flood.tried) >= r0+20 && former() >= f0+20, "not yet"
		})
		u.flood.stop(t, s.what, false)
		refusals := stop(s.what)
		t.Logf("%s: done in %v; the hint names %s; a node's writes of another node's key of a former shard meanwhile: %v",
			s.what, time.Since(stepStart).Round(100*time.Millisecond), u.hintsNow(), refusals)
		if i == 1 {
			// The control of the records' flood: taken without
			// stickyip-node-records' binding, which is then put back.
			u.flood.control(t)
		}
	}
	u.restartController()
	u.hintsBack(start)
	u.stopWatch()
	u.gone()
	t.Logf("upgrade: %v in all", time.Since(start).Round(time.Second))
}

const upNS = "up"

// upNodes are the two nodes of the previous release that are upgraded.
var upNodes = []string{"up-1", "up-2"}

// upgrade is the cluster being upgraded and what the test knows of it.
type upgrade struct {
	t     *testing.T
	cp    *controlPlane
	uids  map[string]types.UID
	want  map[string]string // identity → the node the hint must name
	store map[string]*upStore
	flood *flood

	mu        sync.Mutex
	misses    []string  // what the hint named otherwise, while watched
	firstMiss time.Time // when it first did
	lastMiss  time.Time
	done      chan struct{}
	wg        sync.WaitGroup
}

func newUpgrade(t *testing.T, cp *controlPlane) *upgrade {
	ctx := context.Background()
	u := &upgrade{t: t, cp: cp, uids: map[string]types.UID{}, want: map[string]string{}, store: map[string]*upStore{},
		flood: recordFlood(cp)}
	for _, n := range append(slices.Clone(upNodes), winNode, winVictim) {
		nd, err := cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.uids[n] = nd.UID
	}
	cp.ensureNamespace(upNS)
	return u
}

// previousDir is the previous release's deploy/placement.
func previousDir(t testing.TB) string {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "placement", "former")
}

// installPrevious installs the previous release as its docs said: its
// policies, then — once the dry-run creation of a ConfigMap named
// stickyip-placement-probe is refused — the nodes' grant.
func (u *upgrade) installPrevious() {
	t, cp := u.t, u.cp
	dir := previousDir(t)
	if cp.kubectlPath() != "" {
		t.Logf("kubectl apply -k %s:\n%s", dir, cp.kubectl("apply", "-k", dir))
	} else {
		cp.applyKustomization(dir)
	}
	ctx := context.Background()
	eventually(t, "the former index policy in effect (its probe refused)", time.Minute, 100*time.Millisecond, func() (bool, string) {
		_, err := cp.client.CoreV1().ConfigMaps(upNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stickyip-placement-probe"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "stickyip-placement-probe is refused to everyone"), fmt.Sprint(err)
	})
	if cp.kubectlPath() != "" {
		t.Logf("kubectl apply -k %s/nodes:\n%s", dir, cp.kubectl("apply", "-k", filepath.Join(dir, "nodes")))
	} else {
		cp.applyKustomization(filepath.Join(dir, "nodes"))
	}
}

// upStore is a node's IPAM store as the new publisher reads it.
type upStore struct {
	mu      sync.Mutex
	entries []reservation.Entry
}

func (s *upStore) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries), nil
}

// formerLine is one line of the former index: "<identity> <pod> <seq>
// <since> <until> <ip>".
type formerLine struct {
	identity, pod string
	seq           uint64
	since, until  time.Time
	ip            string
}

func (l formerLine) String() string {
	until := "-"
	if !l.until.IsZero() {
		until = l.until.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return fmt.Sprintf("%s %s %d %s %s %s", l.identity, l.pod, l.seq, l.since.UTC().Format("2006-01-02T15:04:05.000Z"), until, l.ip)
}

// formerShardOf is the former index's shard of identity (the previous
// release's placement.ShardOf): the positions in the alphabet of its last
// character and of the one before it, last + 3 × before, modulo 8.
func formerShardOf(identity string) string {
	const alphabet = "-.0123456789:abcdefghijklmnopqrstuvwxyz"
	pos := func(i int) int {
		if i < 0 {
			return 0
		}
		return strings.IndexByte(alphabet, identity[i])
	}
	n := len(identity)
	if n == 0 {
		return "stickyip-index-0"
	}
	h := pos(n-1) + 3*pos(n-2)
	return fmt.Sprintf("stickyip-index-%x", ((h%8)+8)%8)
}

// upPod is one pod of the scenario: its identity, the node that runs (or
// ran) it, and whether it is gone (its entry a reservation).
type upPod struct {
	identity, pod, node string
	gone                bool
	since               time.Duration // before the test's start
	ip                  string
}

// upPods: name identities whose pods are gone (their entries reservations
// only the former lines vouch for), one of them moved from up-1 to up-2
// (a later pod of the name); keyed identities, running and gone.
var upPods = []upPod{
	{"db-0", "db-0", "up-1", true, 3 * time.Hour, "10.244.1.10"},
	{"db-1", "db-1", "up-1", true, 3 * time.Hour, "10.244.1.11"},
	{"db-2", "db-2", "up-1", true, 3 * time.Hour, "10.244.1.12"},
	{"db-2", "db-2", "up-2", true, 2 * time.Hour, "10.244.2.12"},
	{"identity:cache", "cache-5c7d-a", "up-1", false, time.Hour, "10.244.1.13"},
	{"identity:queue", "queue-7d9f-b", "up-2", false, time.Hour, "10.244.2.14"},
	{"identity:web", "web-6b8c-c", "up-2", true, time.Hour, "10.244.2.15"},
}

// publishPrevious runs the scenario's pods on the previous release: each
// pod created bound to its node, its node's line written with the node's
// credentials as the former publisher wrote it (a claim: its seq the
// shard's resourceVersion), the pods that are gone deleted and their lines
// made reservations; and the Node annotation the former publisher kept.
// The new publishers' stores hold the same. The former hint then names
// the node of each identity (a pod moved names its later node).
func (u *upgrade) publishPrevious() {
	t, cp := u.t, u.cp
	ctx := context.Background()
	t0 := time.Now().UTC().Truncate(time.Second)
	lines := map[string][]formerLine{}
	for _, n := range upNodes {
		u.store[n] = &upStore{}
	}
	for _, p := range upPods {
		pod := testPod(p.pod, nil)
		if key, ok := strings.CutPrefix(p.identity, "identity:"); ok {
			pod.Annotations = map[string]string{annIdentity: key}
		}
		pod.Namespace, pod.Spec.NodeName = upNS, p.node
		made, err := cp.client.CoreV1().Pods(upNS).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l := formerLine{identity: p.identity, pod: p.pod, since: t0.Add(-p.since), ip: p.ip}
		if err := u.writeFormer(p.node, l, &lines); err != nil {
			t.Fatalf("%s (previous release) claiming %s for its pod %s: %v", p.node, p.identity, p.pod, err)
		}
		u.want[p.identity] = p.node
		e := reservation.Entry{Network: "cbr0", Record: &reservation.Record{IP: netip.MustParseAddr(p.ip), State: reservation.Allocated,
			ContainerID: "sb-" + p.pod, IfName: "eth0", Identity: reservation.Identity{Namespace: upNS, Name: p.identity, IfName: "eth0"},
			UID: string(made.UID), PodName: p.pod, Duration: 4 * time.Hour, AllocatedAt: l.since}}
		if p.gone {
			zero := int64(0)
			if err := cp.client.CoreV1().Pods(upNS).Delete(ctx, p.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "pod "+p.pod+" gone", time.Minute, 100*time.Millisecond, func() (bool, string) {
				_, err := cp.client.CoreV1().Pods(upNS).Get(ctx, p.pod, metav1.GetOptions{})
				return apierrors.IsNotFound(err), fmt.Sprint(err)
			})
			l.until = t0.Add(2 * time.Hour)
			if err := u.writeFormer(p.node, l, &lines); err != nil {
				t.Fatalf("%s (previous release) writing the reservation of %s: %v", p.node, p.identity, err)
			}
			e.State, e.ContainerID, e.ExpiresAt = reservation.Reserved, "", l.until
		}
		u.store[p.node].entries = append(u.store[p.node].entries, e)
	}
	for _, n := range upNodes {
		_, err := cp.clientAs(cp.tokens[nodeUser(n)]).CoreV1().Nodes().Patch(ctx, n, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+placement.FormerAnnotation+`":"up/stickyip-index-0"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	for id, n := range u.want {
		if got := u.hinted(id); got != n {
			t.Fatalf("the previous release's hint for %s names %q, want %s (its shard %s: %v)", id, got, n, formerShardOf(id), u.formerShard(formerShardOf(id)).Data)
		}
	}
	t.Logf("previous release: the former index of %s written by %v with their credentials; the former hint names %s", upNS, upNodes, u.hintsNow())
}

// writeFormer writes l as node's line of its shard (replacing its line of
// that identity: a claim when new, or with another pod or ADD), as the
// previous release's publisher did: a strategic-merge patch of the node's
// key, the shard's label and the node's ownerReference, with the node's
// credentials; the shard created when there is none.
func (u *upgrade) writeFormer(node string, l formerLine, lines *map[string][]formerLine) error {
	ctx := context.Background()
	name := formerShardOf(l.identity)
	cms := u.cp.clientAs(u.cp.tokens[nodeUser(node)]).CoreV1().ConfigMaps(upNS)
	var rv uint64
	cur, err := cms.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		rv, _ = parseRV(cur.ResourceVersion)
	}
	key := node + "/" + name
	mine := slices.DeleteFunc(slices.Clone((*lines)[key]), func(o formerLine) bool { return o.identity == l.identity })
	if i := slices.IndexFunc((*lines)[key], func(o formerLine) bool { return o.identity == l.identity }); i >= 0 && (*lines)[key][i].pod == l.pod &&
		(*lines)[key][i].since.Equal(l.since) {
		l.seq = (*lines)[key][i].seq // the same claim: its seq stays
	} else {
		l.seq = rv
	}
	mine = append(mine, l)
	slices.SortFunc(mine, func(a, b formerLine) int { return strings.Compare(a.identity, b.identity) })
	var text []string
	for _, m := range mine {
		text = append(text, m.String())
	}
	value := strings.Join(text, "\n")
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: u.uids[node]}
	label := map[string]string{"stickyip.io/index": strings.TrimPrefix(name, "stickyip-index-")}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": label, "ownerReferences": []any{ref}}, "data": map[string]string{node: value}})
	_, err = cms.Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "stickyip-placement"})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: upNS, Labels: label,
			OwnerReferences: []metav1.OwnerReference{ref}}, Data: map[string]string{node: value}}, metav1.CreateOptions{FieldManager: "stickyip-placement"})
	}
	if err == nil {
		(*lines)[key] = mine
	}
	return err
}

// formerShard is shard name of upNS as admin reads it (empty when gone).
func (u *upgrade) formerShard(name string) *corev1.ConfigMap {
	cm, err := u.cp.client.CoreV1().ConfigMaps(upNS).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &corev1.ConfigMap{}
	}
	if err != nil {
		u.t.Fatal(err)
	}
	return cm
}

// hintFor names the node the hint gives a new pod of identity (a
// server-side dry-run creation): "" for none.
func (u *upgrade) hintFor(identity string) (string, error) {
	p := unboundPod(upNS, identity, map[string]string{annReservation: "10m"})
	if key, ok := strings.CutPrefix(identity, "identity:"); ok {
		p = unboundPod(upNS, "", map[string]string{annReservation: "10m", annIdentity: key})
	}
	got, err := u.cp.client.CoreV1().Pods(upNS).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return "", err
	}
	for _, n := range upNodes {
		if hasOnly(got, n, false) {
			return n, nil
		}
	}
	if got.Spec.Affinity != nil {
		return fmt.Sprintf("an affinity of no node's: %v", got.Spec.Affinity), nil
	}
	return "", nil
}

func (u *upgrade) hinted(identity string) string {
	u.t.Helper()
	n, err := u.hintFor(identity)
	if err != nil {
		u.t.Fatalf("dry-run creation of a pod of %s: %v", identity, err)
	}
	return n
}

// hintsNow says what the hint names for every identity now.
func (u *upgrade) hintsNow() string {
	var out []string
	for _, id := range slices.Sorted(mapsKeys(u.want)) {
		out = append(out, id+"→"+u.hinted(id))
	}
	return strings.Join(out, " ")
}

// watchHints asks the hint for every identity every 200 ms until
// stopWatch, noting every answer that is not the node it must name.
func (u *upgrade) watchHints() {
	u.done = make(chan struct{})
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, id := range slices.Sorted(mapsKeys(u.want)) {
				got, err := u.hintFor(id)
				if err != nil || got != u.want[id] {
					now := time.Now()
					u.mu.Lock()
					u.misses = append(u.misses, fmt.Sprintf("%s %s: %q (%v)", now.Format("15:04:05.000"), id, got, err))
					if u.firstMiss.IsZero() {
						u.firstMiss = now
					}
					u.lastMiss = now
					u.mu.Unlock()
				}
			}
			select {
			case <-u.done:
				return
			case <-tick.C:
			}
		}
	}()
}

// hintsBack waits (at most two minutes) until the hint names every
// identity's node, and says when it did: the end of a window, if the watch
// saw one.
func (u *upgrade) hintsBack(since time.Time) {
	ok := func() bool {
		for id, n := range u.want {
			if got, err := u.hintFor(id); err != nil || got != n {
				return false
			}
		}
		return true
	}
	for !ok() {
		if time.Since(since) > 2*time.Minute {
			u.t.Errorf("the hint does not name the identities' nodes %v after the upgrade began: %s", time.Since(since).Round(time.Second), u.hintsNow())
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	u.t.Logf("the hint names every identity's node at %s", time.Now().Format("15:04:05.000"))
}

// stopWatch stops the watch and fails the test for every answer the hint
// gave that was not the identity's node: a window.
func (u *upgrade) stopWatch() {
	close(u.done)
	u.wg.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.misses) > 0 {
		first, last := u.misses[0], u.misses[len(u.misses)-1]
		u.t.Errorf("a window of %v: %d answers of the hint, watched every 200 ms during the upgrade, named another node or none; the first %s, the last %s",
			u.lastMiss.Sub(u.firstMiss).Round(100*time.Millisecond), len(u.misses), first, last)
		return
	}
	u.t.Log("the hint, watched every 200 ms from the previous release's index to the end, named the same node for every identity")
}

// upgradeFirst are the files of deploy/placement the upgrade's first step
// applies (README.md): not yet the hint, the opt-in and the pod policies,
// whose former namesakes keep answering from the shards.
var upgradeFirst = []string{"crds.yaml", "flowschema.yaml", "pod-identity-policy.yaml", "index-writer-policy.yaml", "node-records-policy.yaml",
	"controller-rbac.yaml", "controller.yaml"}

// importFormer is the controller's flag for the upgrade: the README's
// step 1 patches it into the Deployment, step 3's controller.yaml has it
// not.
const importFormer = "--import-former-index"

// importFormerPatch is the README's JSON patch of stickyip-controller's
// Deployment in step 1: importFormer added to its arguments.
const importFormerPatch = `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"` + importFormer + `"}]`

// controllerArgs are the arguments stickyip-controller's Deployment gives
// it now, but its listen address (startPlacementController sets the
// test's): the controller, which the test runs beside the API server,
// runs with what the Deployment says.
func (u *upgrade) controllerArgs() []string {
	u.t.Helper()
	d, err := u.cp.client.AppsV1().Deployments(deploy.ControllerNamespace).Get(context.Background(), deploy.ControllerName, metav1.GetOptions{})
	if err != nil {
		u.t.Fatal(err)
	}
	var out []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--listen-address=") {
			out = append(out, a)
		}
	}
	return out
}

// step1: the placement API, the records' and the index's policies and the
// controller, its Deployment patched with importFormer (and the
// controller started with the Deployment's arguments); once the probe is
// refused, the new grants (deploy/placement/nodes). The nodes' former
// grant stays: the nodes not yet upgraded go on writing the shards.
func (u *upgrade) step1() {
	t, cp := u.t, u.cp
	dir, nodes := placementDirs(t)
	var files []string
	for _, f := range upgradeFirst {
		files = append(files, filepath.Join(dir, f))
	}
	if cp.kubectlPath() != "" {
		args := []string{"apply"}
		for _, f := range files {
			args = append(args, "-f", f)
		}
		t.Logf("kubectl apply -f %v:\n%s", upgradeFirst, cp.kubectl(args...))
		t.Logf("kubectl patch deployment %s:\n%s", deploy.ControllerName,
			cp.kubectl("-n", deploy.ControllerNamespace, "patch", "deployment", deploy.ControllerName, "--type=json", "-p="+importFormerPatch))
		t.Logf("the NodeRecord policy in effect after %v (the probe refused)", cp.waitRecordsPolicy().Round(time.Millisecond))
		t.Logf("kubectl apply -k %s:\n%s", nodes, cp.kubectl("apply", "-k", nodes))
	} else {
		cp.applyFiles(files...)
		if _, err := cp.client.AppsV1().Deployments(deploy.ControllerNamespace).Patch(context.Background(), deploy.ControllerName, types.JSONPatchType,
			[]byte(importFormerPatch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch deployment %s: %v", deploy.ControllerName, err)
		}
		t.Logf("the NodeRecord policy in effect after %v (the probe refused)", cp.waitRecordsPolicy().Round(time.Millisecond))
		cp.applyKustomization(nodes)
	}
	args := u.controllerArgs()
	if !slices.Contains(args, importFormer) {
		t.Fatalf("stickyip-controller's Deployment after the patch: arguments %v, want %s among them", args, importFormer)
	}
	cp.startPlacementController(args...)
	if got := u.hintsNow(); !u.allWanted() {
		t.Errorf("after step 1 the hint names %s: the former hint must still answer", got)
	}
}

// allWanted reports whether the hint names every identity's node now.
func (u *upgrade) allWanted() bool {
	for id, n := range u.want {
		if got, err := u.hintFor(id); err != nil || got != n {
			return false
		}
	}
	return true
}

// step2: the new checkpointd on every node publishes its record; once
// every record is judged, each of the former index's entries is in the
// new index.
func (u *upgrade) step2() {
	t, cp := u.t, u.cp
	ctx := context.Background()
	for _, n := range upNodes {
		c, err := kube.NewREST(cp.apiClientConfig(cp.tokens[nodeUser(n)]))
		if err != nil {
			t.Fatal(err)
		}
		self := cp.clientAs(cp.tokens[nodeUser(n)])
		p := placement.New(placement.NewAPI(c, n), placement.Options{Node: n, Store: u.store[n], Interval: time.Second,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			NodeObject: func() (*corev1.Node, bool) {
				nd, err := self.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				return nd, err == nil
			}})
		p.Pass(ctx)
		if cp.recordOf(n) == nil {
			t.Fatalf("the new publisher of %s wrote no record", n)
		}
	}
	eventually(t, "every record judged, every entry accepted", time.Minute, 100*time.Millisecond, func() (bool, string) {
		for _, n := range upNodes {
			r := cp.recordOf(n)
			if r.Status.ObservedGeneration != r.Generation || len(r.Status.Claims) != len(r.Spec.Entries) {
				return false, n + "'s record not judged yet"
			}
			for _, c := range r.Status.Claims {
				if !c.Accepted() {
					return false, fmt.Sprintf("%s's claim of %s: %+v", n, c.Identity, c)
				}
			}
		}
		return true, ""
	})
	t.Logf("the new index holds every entry at %s", time.Now().Format("15:04:05.000"))
	index := cp.indexIn(upNS)
	for id, n := range u.want {
		if index[id] != n {
			t.Errorf("the new index gives %s to %q, want %s (the former index's): %s", id, index[id], n, identitiesIn(index))
		}
	}
	for _, n := range upNodes {
		for _, c := range cp.recordOf(n).Status.Claims {
			t.Logf("%s's claim of %s: pod %s, created %v, indexed %v", n, c.Identity, c.Pod, c.Created.UTC().Format(time.RFC3339), c.Indexed)
		}
	}
}

// step3: deploy/placement whole: the hint, the opt-in and the pod
// policies replace their former namesakes at once (both hints read
// ConfigMaps, which the API server already reads for the former one), and
// the controller rolls out without importFormer: controller.yaml applied
// again takes step 1's patch out of its Deployment.
func (u *upgrade) step3() {
	t, cp := u.t, u.cp
	dir, _ := placementDirs(t)
	if cp.kubectlPath() != "" {
		t.Logf("kubectl apply -k %s:\n%s", dir, cp.kubectl("apply", "-k", dir))
	} else {
		cp.applyKustomization(dir)
	}
	args := u.controllerArgs()
	if slices.Contains(args, importFormer) {
		t.Errorf("stickyip-controller's Deployment after deploy/placement applied again: arguments %v, want no %s", args, importFormer)
		args = slices.DeleteFunc(args, func(a string) bool { return a == importFormer })
	}
	cp.stopPlacementController()
	cp.startPlacementController(args...)
}

// step4: the nodes' former grant (first), the former hint's bindings, the
// former shards' policies, the shards.
func (u *upgrade) step4() {
	cp := u.cp
	if cp.kubectlPath() != "" {
		cp.kubectl("delete", "clusterrolebinding,clusterrole", "stickyip:placement-publisher", "stickyip:statefulset-reader")
		cp.kubectl("delete", "mutatingadmissionpolicybinding", "stickyip-placement", "stickyip-statefulsets-hint")
		cp.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "stickyip-placement-index", "stickyip-placement-params")
		cp.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy", "stickyip-placement-fields", "stickyip-placement-collected", "stickyip-placement-params")
		cp.kubectl("delete", "configmap", "-A", "-l", "stickyip.io/index")
		return
	}
	var named [][2]string
	for _, n := range []string{"stickyip:placement-publisher", "stickyip:statefulset-reader"} {
		named = append(named, [2]string{"clusterrolebinding", n}, [2]string{"clusterrole", n})
	}
	named = append(named, [2]string{"mutatingadmissionpolicybinding", "stickyip-placement"}, [2]string{"mutatingadmissionpolicybinding", "stickyip-statefulsets-hint"})
	for _, n := range []string{"stickyip-placement-index", "stickyip-placement-params"} {
		named = append(named, [2]string{"validatingadmissionpolicybinding", n}, [2]string{"validatingadmissionpolicy", n})
	}
	for _, n := range []string{"stickyip-placement-fields", "stickyip-placement-collected", "stickyip-placement-params"} {
		named = append(named, [2]string{"mutatingadmissionpolicybinding", n}, [2]string{"mutatingadmissionpolicy", n})
	}
	u.deleteNamed(named)
	ctx := context.Background()
	l, err := cp.client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "stickyip.io/index"})
	if err != nil {
		u.t.Fatal(err)
	}
	for _, cm := range l.Items {
		if err := cp.client.CoreV1().ConfigMaps(cm.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			u.t.Fatal(err)
		}
	}
}

// deleteNamed deletes each kind/name as admin, as kubectl delete does.
func (u *upgrade) deleteNamed(objs [][2]string) {
	ctx := context.Background()
	a := u.cp.client.AdmissionregistrationV1()
	r := u.cp.client.RbacV1()
	for _, o := range objs {
		var err error
		switch o[0] {
		case "validatingadmissionpolicybinding":
			err = a.ValidatingAdmissionPolicyBindings().Delete(ctx, o[1], metav1.DeleteOptions{})
		case "validatingadmissionpolicy":
			err = a.ValidatingAdmissionPolicies().Delete(ctx, o[1], metav1.DeleteOptions{})
		case "mutatingadmissionpolicybinding":
			err = a.MutatingAdmissionPolicyBindings().Delete(ctx, o[1], metav1.DeleteOptions{})
		case "mutatingadmissionpolicy":
			err = a.MutatingAdmissionPolicies().Delete(ctx, o[1], metav1.DeleteOptions{})
		case "clusterrolebinding":
			err = r.ClusterRoleBindings().Delete(ctx, o[1], metav1.DeleteOptions{})
		case "clusterrole":
			err = r.ClusterRoles().Delete(ctx, o[1], metav1.DeleteOptions{})
		default:
			u.t.Fatalf("deleteNamed: %s?", o[0])
		}
		if err != nil {
			u.t.Fatalf("delete %s %s: %v", o[0], o[1], err)
		}
	}
}

// formerFlood starts a node (the flooder) writing up-1's key of a former
// shard as fast as the API server answers; the returned stop fails the
// test if any write was taken or refused by anything but the former index
// policy (while it is there) or RBAC, and returns the refusals' counts.
func (u *upgrade) formerFlood() (stop func(what string) map[string]int, tried func() int64) {
	var mu sync.Mutex
	var n int64
	counts := map[string]int{}
	end := hammer(2, func(i int) error {
		atomic.AddInt64(&n, 1)
		err := u.formerFloodWrite(i)
		why := "taken"
		switch {
		case err == nil:
		case strings.Contains(err.Error(), "may change only its own entries"):
			why = "refused by the former index policy"
		case apierrors.IsForbidden(err) && strings.Contains(err.Error(), `cannot patch resource "configmaps"`):
			why = "refused by RBAC"
		default:
			why = err.Error()
		}
		mu.Lock()
		counts[why]++
		mu.Unlock()
		return err
	})
	return func(what string) map[string]int {
		end()
		mu.Lock()
		defer mu.Unlock()
		for why, n := range counts {
			if why != "refused by the former index policy" && why != "refused by RBAC" {
				u.t.Errorf("%s: %d writes of another node's key of a former shard: %s", what, n, why)
			}
		}
		if len(counts) == 0 {
			u.t.Errorf("%s: no write of the flood", what)
		}
		return counts
	}, func() int64 { return atomic.LoadInt64(&n) }
}

// formerControl: the former flood's write — the flooder writing up-1's
// key — is refused by the former index policy, naming why; the same write
// of its own key (a line of its own pod, in the same shard) is taken: the
// body reaches the policy.
func (u *upgrade) formerControl() {
	t, cp := u.t, u.cp
	ctx := context.Background()
	shard := formerShardOf("db-0")
	requireRefused(t, "the flooder writing up-1's key of "+shard, u.formerFloodWrite(0), "may change only its own entries")
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("fl-%d", i); formerShardOf("identity:"+k) == shard {
			key = k
		}
	}
	p := testPod("fl-pod", map[string]string{annIdentity: key})
	p.Namespace, p.Spec.NodeName = upNS, winNode
	if _, err := cp.client.CoreV1().Pods(upNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]formerLine{}
	err := u.writeFormer(winNode, formerLine{identity: "identity:" + key, pod: p.Name, since: time.Now().UTC().Truncate(time.Millisecond), ip: "10.244.9.1"}, &lines)
	requireAccepted(t, "the flooder writing its own key of "+shard+", a line of its own pod", err)
}

// formerFloodWrite is a node (the flooder) giving up-1's key of its former
// shard its own line: the write no step may take.
func (u *upgrade) formerFloodWrite(i int) error {
	name := formerShardOf("db-0")
	body := fmt.Sprintf(`{"data":{%q:"db-0 db-0 0 2026-01-01T00:00:00.000Z - 10.244.9.%d"}}`, upNodes[0], i%250+1)
	_, err := u.cp.clientAs(u.cp.tokens[nodeUser(winNode)]).CoreV1().ConfigMaps(upNS).Patch(context.Background(), name, types.StrategicMergePatchType,
		[]byte(body), metav1.PatchOptions{})
	return err
}

// restartController restarts stickyip-controller after the upgrade, the
// former shards and its grant to read them gone: the index it starts from
// and the verdicts in the records keep every entry.
func (u *upgrade) restartController() {
	before := u.cp.indexIn(upNS)
	u.cp.stopPlacementController()
	u.cp.startPlacementController(u.controllerArgs()...)
	// Its first pass judges every record again (a Node's informer adds
	// each): the verdicts answer the records' generations.
	eventually(u.t, "the restarted controller's judgement", time.Minute, 200*time.Millisecond, func() (bool, string) {
		for _, n := range upNodes {
			if r := u.cp.recordOf(n); r.Status.ObservedGeneration != r.Generation || slices.ContainsFunc(r.Status.Claims, func(c placementv1.Claim) bool { return !c.Accepted() }) {
				return false, n + ": " + fmt.Sprint(r.Status.Claims)
			}
		}
		return true, ""
	})
	if after := u.cp.indexIn(upNS); identitiesIn(after) != identitiesIn(before) {
		u.t.Errorf("the index after the controller's restart: %s, before %s", identitiesIn(after), identitiesIn(before))
	}
	u.t.Logf("the controller restarted after the upgrade: the index %s; the hint names %s", identitiesIn(u.cp.indexIn(upNS)), u.hintsNow())
}

// gone requires that nothing of the previous release is left: its
// shards, policies, grants, the Node annotation of its publisher.
func (u *upgrade) gone() {
	t, cp := u.t, u.cp
	ctx := context.Background()
	l, err := cp.client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "stickyip.io/index"})
	if err != nil || len(l.Items) > 0 {
		t.Errorf("former shards left: %d (%v)", len(l.Items), err)
	}
	a := cp.client.AdmissionregistrationV1()
	for _, n := range []string{"stickyip-placement-index", "stickyip-placement-params"} {
		if _, err := a.ValidatingAdmissionPolicies().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ValidatingAdmissionPolicy %s left (%v)", n, err)
		}
	}
	for _, n := range []string{"stickyip-placement-fields", "stickyip-placement-collected", "stickyip-placement-params"} {
		if _, err := a.MutatingAdmissionPolicies().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("MutatingAdmissionPolicy %s left (%v)", n, err)
		}
	}
	for _, n := range []string{"stickyip-placement", "stickyip-statefulsets-hint"} {
		if _, err := a.MutatingAdmissionPolicyBindings().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the former hint's MutatingAdmissionPolicyBinding %s left (%v)", n, err)
		}
	}
	for _, n := range []string{"stickyip:placement-publisher", "stickyip:statefulset-reader"} {
		if _, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRoleBinding %s left (%v)", n, err)
		}
		if _, err := cp.client.RbacV1().ClusterRoles().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole %s left (%v)", n, err)
		}
	}
	for _, n := range upNodes {
		nd, err := cp.client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := nd.Annotations[placement.FormerAnnotation]; ok {
			t.Errorf("Node %s still carries %s=%q", n, placement.FormerAnnotation, v)
		}
	}
	t.Logf("the previous release is gone: no former shard, policy, grant or Node annotation; the hint names %s", u.hintsNow())
}
