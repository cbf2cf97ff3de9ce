//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness"
)

// burstNodes is the most nodes a burst scenario uses: each has its own
// credentials (system:node:<name> in system:nodes).
const burstNodes = 100

// burstScenarios are the bursts of issue 38: a StatefulSet scaled up with
// podManagementPolicy Parallel over 50 nodes, a full node's new pods, and
// 5,000 claims from 100 nodes; each in a namespace of its own.
var burstScenarios = []struct {
	nodes, perNode int
	target         time.Duration // issue 38's bound
}{{50, 10, 10 * time.Second}, {1, 110, 5 * time.Second}, {100, 50, 60 * time.Second}}

// BenchmarkPlacementBurst starts one real publisher (checkpointd/placement,
// default options, client-go's default rate limit as in checkpointd) per
// node, each with that node's credentials and a store holding its new
// sticky pods of one namespace (pods bound to it in the API server), all at
// the same moment, against a real kube-apiserver with deploy/placement, and
// prints how long until every claim is in the index, and how many API
// writes (failed ones counted) and reads each claim cost. The benchmark
// fails only when the index is wrong (a claim missing after 5 minutes, or
// an identity's hint naming another node): the figures are for
// docs/placement.md.
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
	var out strings.Builder
	fmt.Fprintf(&out, "\nA burst of claims, every publisher started at once, kube-apiserver %s (Node,RBAC, NodeRestriction, deploy/placement)\n\n", release)
	fmt.Fprintf(&out, "| nodes × new sticky pods | claims | 25 %% / 50 %% / 90 %% / all in the index | issue 38's bound | API writes (failed) per claim | reads per claim |\n|---|---|---|---|---|---|\n")
	for i, sc := range burstScenarios {
		if only := os.Getenv("BURST_SCENARIOS"); only != "" && !slices.Contains(strings.Split(only, ","), strconv.Itoa(i)) {
			continue
		}
		ns := fmt.Sprintf("burst-%d", i)
		cp.ensureNamespace(ns)
		r := runBurst(b, cp, admin, ns, names[:sc.nodes], sc.perNode)
		claims := sc.nodes * sc.perNode
		fmt.Fprintf(&out, "| %d × %d | %d | %s / %s / %s / **%s** | %s | %.2f (%d failed of %d) | %.2f |\n", sc.nodes, sc.perNode, claims,
			r.at(0.25), r.at(0.5), r.at(0.9), r.at(1), sc.target, float64(r.writes)/float64(claims), r.failed, r.writes,
			float64(r.reads)/float64(claims))
		b.ReportMetric(r.at(1).Seconds(), fmt.Sprintf("s-all-%dx%d", sc.nodes, sc.perNode))
		b.ReportMetric(float64(r.writes)/float64(claims), fmt.Sprintf("writes/claim-%dx%d", sc.nodes, sc.perNode))
	}
	b.Log(out.String())
}

func burstNode(i int) string { return fmt.Sprintf("burst-%03d", i) }

// burstResult is one burst: when each claim appeared in the index, and
// the nodes' requests.
type burstResult struct {
	landed                []time.Duration // sorted
	writes, failed, reads int64
}

// at is when the fraction f of the claims was in the index.
func (r burstResult) at(f float64) time.Duration {
	i := min(len(r.landed)-1, max(0, int(f*float64(len(r.landed)))-1))
	return r.landed[i].Round(10 * time.Millisecond)
}

// runBurst creates perNode pods bound to each of nodes in ns, then starts
// every node's publisher at once, each with a store holding its pods'
// allocations, and returns when each claim landed (as admin sees the index)
// and what the publishers asked of the API server.
func runBurst(b *testing.B, cp *controlPlane, admin kubernetes.Interface, ns string, nodes []string, perNode int) burstResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	want := map[string]string{} // identity → node
	stores := map[string]*burstStore{}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, n := range nodes {
		st := &burstStore{}
		for k := range perNode {
			pod := fmt.Sprintf("%s-%d", strings.TrimPrefix(n, "burst-"), k) // a pod-name identity, as a StatefulSet's
			p := testPod(pod, nil)
			p.Namespace, p.Spec.NodeName = ns, n
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			want[pod] = n
			ip := netip.AddrFrom4([4]byte{10, byte(100 + i/250), byte(i % 250), byte(k + 1)})
			st.entries = append(st.entries, reservation.Entry{Network: "cbr0", Record: &reservation.Record{
				IP: ip, State: reservation.Allocated, ContainerID: "sb-" + pod, IfName: "eth0",
				Identity: reservation.Identity{Namespace: ns, Name: pod, IfName: "eth0"}, PodName: pod,
				Duration: 10 * time.Minute, AllocatedAt: now}})
		}
		stores[n] = st
	}
	var res burstResult
	var pubs []*placement.Publisher
	for _, n := range nodes {
		rc := cp.apiClientConfig(cp.tokens[nodeUser(n)]) // client-go's default rate limit, as checkpointd's
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt, &res} }
		p, err := placement.New(rc, placement.Options{Node: n, Store: stores[n], Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		pubs = append(pubs, p)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Go(func() { p.Run(ctx) })
	}
	landed := map[string]bool{}
	deadline := start.Add(5 * time.Minute)
	for len(landed) < len(want) && time.Now().Before(deadline) {
		for _, s := range cp.shardsIn(ns) {
			for n := range s.Values {
				lines, _ := s.Lines(n)
				for _, l := range lines {
					if want[l.Identity] == n && !landed[l.Identity] && s.OwnedBy(n) {
						landed[l.Identity] = true
						res.landed = append(res.landed, time.Since(start))
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if len(landed) < len(want) {
		b.Fatalf("%s: %d of %d claims in the index after 5 minutes", ns, len(landed), len(want))
	}
	for id, n := range want {
		if got := cp.hinted(ns, id); got != n {
			b.Fatalf("%s/%s: the index names %q, want %s", ns, id, got, n)
		}
	}
	slices.Sort(res.landed)
	b.Logf("%s: %d nodes × %d claims in the index after %s; %d writes (%d failed), %d reads", ns, len(nodes), perNode,
		res.landed[len(res.landed)-1].Round(time.Millisecond), res.writes, res.failed, res.reads)
	return res
}

// burstStore is a node's IPAM store as the publisher reads it.
type burstStore struct {
	mu      sync.Mutex
	entries []reservation.Entry
}

func (s *burstStore) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries), nil
}

// set changes every entry with f, on copies (the publisher may hold the
// old ones).
func (s *burstStore) set(f func(*reservation.Entry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.entries {
		rec := *e.Record
		e.Record = &rec
		f(&e)
		s.entries[i] = e
	}
}

// countingTransport counts a publisher's requests: reads (GET), writes
// (anything else), and writes answered with an error.
type countingTransport struct {
	rt  http.RoundTripper
	res *burstResult
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if r.Method == http.MethodGet {
		atomic.AddInt64(&c.res.reads, 1)
		return resp, err
	}
	atomic.AddInt64(&c.res.writes, 1)
	if err != nil || resp.StatusCode >= 300 {
		atomic.AddInt64(&c.res.failed, 1)
	}
	return resp, err
}
