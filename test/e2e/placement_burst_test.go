//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness"
)

// burstNodes is the most nodes a burst scenario uses: each has its own
// credentials (system:node:<name> in system:nodes).
const burstNodes = 100

// burstScenarios: a StatefulSet scaled up with podManagementPolicy
// Parallel over 50 nodes, a full node's new pods, and 5,000 claims from
// 100 nodes; each in a namespace of its own.
var burstScenarios = []struct {
	nodes, perNode int
	target         time.Duration // the bound the specification sets (SPEC, Placement)
}{{50, 10, 10 * time.Second}, {1, 110, 5 * time.Second}, {100, 50, 60 * time.Second}}

// burstAudit logs every request of the nodes and of stickyip-controller
// when received, and its answer: the burst counts them.
const burstAudit = `- level: Metadata
  userGroups: ["system:nodes"]
  omitStages: ["ResponseStarted", "Panic"]
- level: Metadata
  users: ["` + placementControllerUser + `"]
  omitStages: ["ResponseStarted", "Panic"]
`

// BenchmarkPlacementBurst runs, on a real kube-apiserver with
// deploy/placement and the real stickyip-controller (its ServiceAccount's
// credentials, default flags), one real publisher per node
// (checkpointd/placement with checkpointd's options and client: default
// rate limit, its own for the publisher; the node's own credentials, and
// its record's watch, as checkpointd runs them), each with a store holding
// its new sticky pods of one namespace (pods bound to it in the API
// server), all started at the same moment; it prints how long until each
// claim is in the index (as the administrator's watch of it sees it), and the requests
// of the publishers and of the controller per claim (from the API server's
// audit log). The nodes run before the burst, as a cluster's do: each has
// its record (none of its entries) and its watch of it. The benchmark
// fails only when the index is wrong (a claim missing after 5 minutes, or
// an identity given to another node): the figures are for
// test/bench/README.md.
func BenchmarkPlacementBurst(b *testing.B) {
	for _, release := range []string{defaultK8sRelease, "1.36"} {
		b.Run(release, func(b *testing.B) { burst(b, binsOf(b, release), release) })
	}
}

// burst runs burstScenarios on one API server of release.
func burst(b *testing.B, bins bins, release string) {
	netns, h := newNetns(b, "burst")
	var names []string
	for i := range burstNodes {
		names = append(names, burstNode(i))
	}
	cp := newControlPlane(b, bins, harness.ShortTempDir(b), testLogDir(b), netns, h, "127.0.0.1", names...)
	cp.auditRules = burstAudit
	cp.startControlPlane()
	cp.applyPlacement()
	ctx := context.Background()
	cfg := cp.apiClientConfig(cp.adminToken)
	cfg.QPS, cfg.Burst = -1, 0
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range names {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cp.startPlacementController()
	var out strings.Builder
	fmt.Fprintf(&out, "\nA burst of claims, every publisher started at once, kube-apiserver %s (Node,RBAC, NodeRestriction, deploy/placement, stickyip-controller)\n\n", release)
	fmt.Fprintf(&out, "| nodes × new sticky pods | claims | 25 %% / 50 %% / 90 %% / all in the index | bound | nodes: writes (failed) per claim | nodes: reads per claim | controller: writes per claim (shards + statuses) | controller: reads per claim | controller: passes |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, sc := range burstScenarios {
		if only := os.Getenv("BURST_SCENARIOS"); only != "" && !slices.Contains(strings.Split(only, ","), strconv.Itoa(i)) {
			continue
		}
		ns := fmt.Sprintf("burst-%d", i)
		cp.ensureNamespace(ns)
		r := runBurst(b, cp, admin, ns, names[:sc.nodes], sc.perNode)
		claims := float64(sc.nodes * sc.perNode)
		ctlWrites := r.ctl.writes - r.ctl.byResource["leases"] // its Lease's renewals are its running cost, not the claims'
		fmt.Fprintf(&out, "| %d × %d | %d | %s / %s / %s / **%s** | %s | %.2f (%d of %d failed) | %.2f | %.3f (%d + %d) | %.3f | %d |\n",
			sc.nodes, sc.perNode, sc.nodes*sc.perNode, r.at(0.25), r.at(0.5), r.at(0.9), r.at(1), sc.target,
			float64(r.nodes.writes)/claims, r.nodes.failed, r.nodes.writes, float64(r.nodes.reads)/claims,
			float64(ctlWrites)/claims, r.ctl.byResource["configmaps"], r.ctl.byResource["noderecords/status"],
			float64(r.ctl.reads)/claims, r.passes)
		b.ReportMetric(r.at(1).Seconds(), fmt.Sprintf("s-all-%dx%d", sc.nodes, sc.perNode))
		b.ReportMetric(float64(r.nodes.writes)/claims, fmt.Sprintf("node-writes/claim-%dx%d", sc.nodes, sc.perNode))
		b.ReportMetric(float64(ctlWrites)/claims, fmt.Sprintf("controller-writes/claim-%dx%d", sc.nodes, sc.perNode))
		if r.at(1) > sc.target {
			b.Logf("%d × %d: the last claim in the index after %s, past the bound of %s", sc.nodes, sc.perNode, r.at(1), sc.target)
		}
	}
	b.Log(out.String())
}

func burstNode(i int) string { return fmt.Sprintf("burst-%03d", i) }

// burstResult is one burst: when each claim appeared in the index, and
// the requests of the nodes and of the controller meanwhile.
type burstResult struct {
	landed     []time.Duration // sorted
	nodes, ctl requestCount
	passes     int // the controller's passes (its metric)
}

// at is when the fraction f of the claims was in the index.
func (r burstResult) at(f float64) time.Duration {
	i := min(len(r.landed)-1, max(0, int(f*float64(len(r.landed)))-1))
	return r.landed[i].Round(10 * time.Millisecond)
}

// burstNodeRun is one node of a burst: its store, its record's watch, its
// publisher.
type burstNodeRun struct {
	store   *burstStore
	watcher *placement.Watcher
	pub     *placement.Publisher
}

// runBurst creates perNode pods bound to each of nodes in ns, starts each
// node's record watch and gives it its record as checkpointd would with
// nothing sticky yet, then starts every node's publisher at once, each
// with a store holding its pods' allocations, and returns when each claim
// landed (as the administrator's watch of the index saw it) and what the nodes and the controller
// asked of the API server from the start until the controller's verdicts
// were all written.
func runBurst(b *testing.B, cp *controlPlane, admin kubernetes.Interface, ns string, nodes []string, perNode int) burstResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := map[string]string{} // identity → node
	runs := map[string]*burstNodeRun{}
	now := time.Now().UTC().Truncate(time.Millisecond)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, n := range nodes {
		nd, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}) // as the node's own watch holds it
		if err != nil {
			b.Fatal(err)
		}
		r := &burstNodeRun{store: &burstStore{}}
		for k := range perNode {
			pod := fmt.Sprintf("%s-%d", strings.TrimPrefix(n, "burst-"), k) // a pod-name identity, as a StatefulSet's
			p := testPod(pod, nil)
			p.Namespace, p.Spec.NodeName = ns, n
			created, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			want[pod] = n
			ip := netip.AddrFrom4([4]byte{10, byte(100 + i/250), byte(i % 250), byte(k + 1)})
			r.store.pending = append(r.store.pending, reservation.Entry{Network: "cbr0", Record: &reservation.Record{
				IP: ip, State: reservation.Allocated, ContainerID: "sb-" + pod, IfName: "eth0",
				Identity: reservation.Identity{Namespace: ns, Name: pod, IfName: "eth0"}, PodName: pod, UID: string(created.UID),
				Duration: 10 * time.Minute, AllocatedAt: now}})
		}
		// checkpointd's client: client-go's default rate limit, the
		// publisher's requests under a limit of their own.
		rc := cp.apiClientConfig(cp.tokens[nodeUser(n)])
		rc.QPS, rc.Burst = 0, 0
		c, err := kube.NewREST(rc)
		if err != nil {
			b.Fatal(err)
		}
		pc, err := c.WithOwnRateLimit()
		if err != nil {
			b.Fatal(err)
		}
		r.watcher = placement.NewWatcher(c, n, log)
		r.pub = placement.New(placement.NewAPI(pc, n), placement.Options{Node: n, Store: r.store,
			NodeObject: func() (*corev1.Node, bool) { return nd, true }, Record: r.watcher.Record, Log: log})
		wg.Go(func() { r.watcher.Run(ctx) })
		runs[n] = r
	}
	// The nodes as they run before the burst: each has written its record
	// (no entry of this namespace), its watch has seen it, and the
	// controller has judged it.
	for _, n := range nodes {
		runs[n].pub.Pass(ctx)
	}
	for _, n := range nodes {
		eventually(b, n+"'s watch seeing its record, judged", time.Minute, 50*time.Millisecond, func() (bool, string) {
			rec, synced := runs[n].watcher.Record()
			if !synced || rec == nil {
				return false, fmt.Sprintf("synced %v, record %v", synced, rec != nil)
			}
			return rec.Status.ObservedGeneration == rec.Generation, fmt.Sprintf("generation %d, observed %d", rec.Generation, rec.Status.ObservedGeneration)
		})
	}
	passes0 := cp.controllerMetric("stickyip_controller_passes_total")
	// The administrator watches the namespace's index: each claim's time is
	// when the shard write that holds it reached the watch.
	shards, err := cp.dynamicAs(cp.adminToken).Resource(indexGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{LabelSelector: placementv1.IndexLabel})
	if err != nil {
		b.Fatal(err)
	}
	defer shards.Stop()
	for _, n := range nodes {
		runs[n].store.release()
	}
	start := time.Now()
	for _, n := range nodes {
		wg.Go(func() { runs[n].pub.Run(ctx) })
	}
	var res burstResult
	landed := map[string]bool{}
	note := func(nodes map[string]string, at time.Duration) {
		for id, n := range nodes {
			if want[id] == n && !landed[id] {
				landed[id] = true
				res.landed = append(res.landed, at)
			}
		}
	}
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	for len(landed) < len(want) {
		select {
		case ev, ok := <-shards.ResultChan():
			if !ok {
				b.Fatalf("%s: the administrator's watch of the index ended", ns)
			}
			if u, isObj := ev.Object.(*unstructured.Unstructured); isObj && ev.Type != watch.Deleted {
				keys, _, _ := unstructured.NestedStringMap(u.Object, "data")
				nodes := map[string]string{}
				placementv1.MergeShard(nodes, u.GetLabels()[placementv1.IndexLabel], keys)
				note(nodes, time.Since(start))
			}
		case <-timeout.C:
			b.Fatalf("%s: %d of %d claims in the index after 5 minutes", ns, len(landed), len(want))
		}
	}
	for id, n := range cp.indexIn(ns) {
		if want[id] != n {
			b.Fatalf("%s/%s: the index names %q, want %q", ns, id, n, want[id])
		}
	}
	// The controller's pass ends with the records' status: count until every
	// claim of the burst is marked indexed there.
	for _, n := range nodes {
		eventually(b, n+"'s claims marked indexed", 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
			r := cp.recordOf(n)
			indexed := 0
			for _, c := range r.Status.Claims {
				if c.Namespace == ns && c.Indexed {
					indexed++
				}
			}
			return indexed == perNode && r.Status.ObservedGeneration == r.Generation, fmt.Sprintf("%d of %d indexed, generation %d observed %d",
				indexed, perNode, r.Generation, r.Status.ObservedGeneration)
		})
	}
	end := time.Now()
	cancel()
	wg.Wait()
	slices.Sort(res.landed)
	res.nodes = cp.auditCount(start, end, func(user string) bool { return strings.HasPrefix(user, "system:node:") })
	res.ctl = cp.auditCount(start, end, func(user string) bool { return user == placementControllerUser })
	res.passes = cp.controllerMetric("stickyip_controller_passes_total") - passes0
	b.Logf("%s: %d nodes × %d claims in the index after %s; nodes: %s; controller: %s, %d passes", ns, len(nodes), perNode,
		res.landed[len(res.landed)-1].Round(time.Millisecond), res.nodes, res.ctl, res.passes)
	return res
}

// burstStore is a node's IPAM store as the publisher reads it: empty until
// release, then holding the burst's allocations.
type burstStore struct {
	mu       sync.Mutex
	pending  []reservation.Entry
	released bool
}

func (s *burstStore) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.released {
		return nil, nil
	}
	return slices.Clone(s.pending), nil
}

// release makes the store hold its allocations (the burst's ADDs).
func (s *burstStore) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = true
}

// requestCount is what some users asked of the API server, as its audit
// log received it.
type requestCount struct {
	reads, writes, failed int            // reads: get, list, watch; writes: the rest; failed: writes answered ≥ 300
	byResource            map[string]int // writes by resource (and subresource)
	byVerb                map[string]int // every request by verb and resource
}

func (c requestCount) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.byVerb)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.byVerb[k]))
	}
	return fmt.Sprintf("%d writes (%d failed), %d reads [%s]", c.writes, c.failed, c.reads, strings.Join(parts, ", "))
}

// controllerMetric reads a counter or gauge of stickyip-controller's
// /metrics (no labels), as an integer.
func (cp *controlPlane) controllerMetric(name string) int {
	cp.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(cp.nsHandle)}}
	resp, err := c.Get("http://" + placementControllerAddr + "/metrics")
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		cp.t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				cp.t.Fatalf("%s: %q: %v", name, v, err)
			}
			return int(f)
		}
	}
	cp.t.Fatalf("stickyip-controller's /metrics: no %s", name)
	return 0
}

// auditCount counts the requests of the users who received between from
// and to (the audit policy must log them: auditRules), each once by its
// audit ID at the first stage logged: the base policy logs the
// controller's index writes at ResponseComplete only.
func (cp *controlPlane) auditCount(from, to time.Time, who func(user string) bool) requestCount {
	cp.t.Helper()
	f, err := os.Open(cp.auditLogPath())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	out := requestCount{byResource: map[string]int{}, byVerb: map[string]int{}}
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var ev struct {
			AuditID string `json:"auditID"`
			Verb    string `json:"verb"`
			Stage   string `json:"stage"`
			User    struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			Received time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !who(ev.User.Username) || ev.Received.Before(from) || !ev.Received.Before(to) {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		read := ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch"
		if !seen[ev.AuditID] {
			seen[ev.AuditID] = true
			out.byVerb[ev.Verb+" "+res]++
			if read {
				out.reads++
			} else {
				out.writes++
				out.byResource[res]++
			}
		}
		if ev.Stage == "ResponseComplete" && !read && ev.ResponseStatus.Code >= 300 {
			out.failed++
		}
	}
	if err := sc.Err(); err != nil {
		cp.t.Fatal(err)
	}
	return out
}
