//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/index"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/test/harness"
)

// Placement benchmark (make bench-placement): what the placement hint adds
// to a pod creation as the placement index grows, on a real kube-apiserver
// (Node,RBAC, NodeRestriction) with deploy/placement applied.
const (
	benchNamespaces = 100         // namespaces holding identities at the last levels: the two measured, and 98 more
	benchNodes      = 100         // Node objects the index names
	benchRounds     = 3           // alternations of the policies on and off per level
	benchPodLabel   = "bench=pod" // every pod the benchmark creates
	// benchIdentityLen is the longest stickyip.io/identity the plugin
	// accepts (a DNS subdomain), which is the key of its keyed shard.
	benchIdentityLen = 253
)

// benchSpaces are the measured namespaces: one whose identities are
// short (db-<k>, as a StatefulSet's pods), one whose identities are the
// longest the plugin accepts. Each holds as many identities as the level
// says.
var benchSpaces = []benchSpace{{name: "bench"}, {name: "bench-long", long: true}}

// benchSpace is a measured namespace and the form of its identities.
type benchSpace struct {
	name string
	long bool
}

// label is how a table names the space's identities.
func (s benchSpace) label() string {
	if s.long {
		return fmt.Sprintf("%d chars", benchIdentityLen)
	}
	return "short"
}

// key is the stickyip.io/identity of the space's k-th identity (gone: one
// the index does not hold). The long form shares its first 240-odd
// characters with every other: a lookup compares whole strings.
func (s benchSpace) key(k int, gone bool) string {
	tail := fmt.Sprintf("db-%d", k)
	if gone {
		tail = fmt.Sprintf("gone-%d", k)
	}
	if !s.long {
		return tail
	}
	return strings.Repeat("x", benchIdentityLen-len(tail)-1) + "-" + tail
}

// benchLevels are the index sizes measured: identities in each measured
// namespace, and in the whole cluster (both measured namespaces, and
// 30,000 spread over 98 more at the last two).
var benchLevels = []struct{ inNamespace, total int }{{0, 0}, {1000, 2000}, {10000, 20000}, {10000, 50000}, {30000, 90000}}

// benchPods is how many pods of each kind are created per round and
// setting.
var benchPods = 40

// benchQuick, with BENCH_PLACEMENT_QUICK=1, shrinks the benchmark to try
// it: 4 pods a cell, and a hundredth of the identities unless
// BENCH_PLACEMENT_LEVELS (n/total,...) names the levels.
func benchQuick(t testing.TB) {
	if v := os.Getenv("BENCH_PLACEMENT_LEVELS"); v != "" {
		benchLevels = benchLevels[:0]
		for _, lv := range strings.Split(v, ",") {
			var n, total int
			if _, err := fmt.Sscanf(lv, "%d/%d", &n, &total); err != nil {
				t.Fatalf("BENCH_PLACEMENT_LEVELS %q: want n/total,...: %v", v, err)
			}
			benchLevels = append(benchLevels, struct{ inNamespace, total int }{n, total})
		}
	}
	if os.Getenv("BENCH_PLACEMENT_QUICK") != "1" || benchPods != 40 {
		return
	}
	benchPods = 4
	for i := range benchLevels {
		if os.Getenv("BENCH_PLACEMENT_LEVELS") != "" {
			break
		}
		benchLevels[i].inNamespace /= 100
		benchLevels[i].total /= 100
	}
}

// benchTodayKinds: a pod whose identity the index holds (the preferred
// hint, and with stickyip.io/placement: required the required one), one
// that reserves its IP with no identity in the index, one without any
// stickyip annotation.
var benchTodayKinds = []string{"held", "held, required", "not held", "plain"}

// benchKinds are the rows of a level: today's kinds, then the namespace
// opt-in's (placement_bench_optin_test.go).
var benchKinds = append(slices.Clip(benchTodayKinds), benchOptInMarked, benchOptInUnmarked,
	benchOptInBound+"held", benchOptInUnbound+"held", benchOptInBound+"plain", benchOptInUnbound+"plain")

// BenchmarkPlacementAdmission prints the median time of a pod creation
// (POST, from the client) with the placement policies' bindings in place
// and removed, on the same API server in the same run, for each of
// benchKinds, with short identities and with the longest the plugin
// accepts, at 0, 1,000, 10,000 and 30,000 identities in the measured
// namespace and up to 90,000 in the cluster, on each supported minor
// (1.37, 1.36: one table, side by side). The index is written as
// stickyip-controller writes it (controller/index's packing, its API
// client's creations and merge patches), by the administrator. Every held
// pod created with the policies on must get exactly the term (preferred,
// or required) for its identity's node, and every other pod none: the
// benchmark fails otherwise (a fast wrong answer is no answer).
func BenchmarkPlacementAdmission(b *testing.B) {
	benchQuick(b)
	results := map[string][]admissionRow{}
	releases := []string{defaultK8sRelease, "1.36"}
	for _, release := range releases {
		b.Run(release, func(b *testing.B) { results[release] = measureAdmission(b, binsOf(b, release), release) })
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nPod creation (POST, client round trip), median of %d per cell; policies off = their bindings removed, same server, same run\n\n", benchRounds*benchPods)
	fmt.Fprintf(&out, "| identities (namespace / cluster) | identity | pod | 1.37: off | on | added | 1.36: off | on | added |\n|---|---|---|---|---|---|---|---|---|\n")
	rows := max(len(results[defaultK8sRelease]), len(results["1.36"])) // a run of one minor leaves the other's cells empty
	for i := range rows {
		for _, s := range benchSpaces {
			for _, kind := range benchKinds {
				c := cellKey(s, kind)
				var cells []string
				level := ""
				for _, release := range releases {
					if i >= len(results[release]) {
						cells = append(cells, "— | — | —")
						continue
					}
					r := results[release][i]
					if len(r.on[c]) == 0 {
						continue // no identity held yet
					}
					level = fmt.Sprintf("%d / %d", r.level, r.total)
					cells = append(cells, r.cells(c))
				}
				if level != "" {
					fmt.Fprintf(&out, "| %s | %s | %s | %s |\n", level, s.label(), kind, strings.Join(cells, " | "))
				}
			}
		}
	}
	b.Log(out.String())
}

// cellKey names a cell's creations in an admissionRow.
func cellKey(s benchSpace, kind string) string { return s.name + "/" + kind }

// binsOf are the binaries of a Kubernetes release (scripts/build-k8s.sh).
func binsOf(t testing.TB, release string) bins {
	b := findBins(t)
	if release != defaultK8sRelease {
		b.k8s = filepath.Join(harness.OutputDir(), "k8s", release, "bin")
	}
	b.require(t, "etcd", "kube-apiserver")
	return b
}

// admissionRow is one level of the index: the creations measured with the
// policies off and on, by cellKey.
type admissionRow struct {
	level, total int
	off, on      map[string][]time.Duration
}

// cells are "off | on | added" of a cell, in milliseconds.
func (r admissionRow) cells(c string) string {
	off, on := durMedian(r.off[c]), durMedian(r.on[c])
	return fmt.Sprintf("%.2f ms | %.2f ms | **%+.2f ms**", msOf(off), msOf(on), msOf(on-off))
}

// measureAdmission runs the levels on one API server of release.
func measureAdmission(b *testing.B, bins bins, release string) []admissionRow {
	netns, h := newNetns(b, "bench")
	cp := newControlPlane(b, bins, harness.ShortTempDir(b), testLogDir(b), netns, h, "127.0.0.1")
	cp.startControlPlane()
	cp.applyPlacement()
	ctx := context.Background()
	// No client-side rate limit: the figures are the server's.
	cfg := cp.apiClientConfig(cp.adminToken)
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	// The index's writes as stickyip-controller makes them, as it: the
	// administrator impersonates its ServiceAccount (stickyip-index-writer
	// lets no one else write a shard).
	wcfg := rest.CopyConfig(cfg)
	wcfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + deploy.ControllerNamespace + ":" + deploy.ControllerName,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deploy.ControllerNamespace, "system:authenticated"}}
	writer, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range benchNodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode(i)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, s := range benchSpaces {
		cp.ensureNamespace(s.name)
	}
	for i := len(benchSpaces); i < benchNamespaces; i++ {
		cp.ensureNamespace(benchNS(i))
	}
	cp.ensureNamespace(benchProbeNS)
	binding, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(ctx, placementBindingName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pb := &placementBench{b: b, cs: cs, writer: writer, binding: binding, shards: map[string][]index.Shard{}}
	pb.fill(ctx, benchProbeNS, benchSpace{}, 1) // the probe: one identity the policy's state is seen by
	var rows []admissionRow
	wrong := 0
	for _, lv := range benchLevels {
		start := time.Now()
		for _, s := range benchSpaces {
			pb.fill(ctx, s.name, s, lv.inNamespace)
		}
		if rest := lv.total - len(benchSpaces)*lv.inNamespace; rest > 0 {
			others := benchNamespaces - len(benchSpaces)
			for i := range others {
				pb.fill(ctx, benchNS(len(benchSpaces)+i), benchSpace{}, rest/others+min(1, max(0, rest%others-i)))
			}
		}
		total := 0
		for ns, n := range pb.filled {
			if ns != benchProbeNS {
				total += n
			}
		}
		b.Logf("%s: index: %d identities in each of %s, %d in the cluster (written in %s); %s", release, lv.inNamespace,
			strings.Join(spaceNames(), " and "), total, time.Since(start).Round(time.Millisecond), pb.shardSizes(ctx))
		pb.setPolicy(ctx, true)
		pb.waitIndexed(ctx, lv.inNamespace)
		r := admissionRow{level: lv.inNamespace, total: total, off: map[string][]time.Duration{}, on: map[string][]time.Duration{}}
		for round := range benchRounds {
			for _, on := range []bool{round%2 == 0, round%2 != 0} {
				pb.setPolicy(ctx, on)
				got := r.off
				if on {
					got = r.on
				}
				for _, s := range benchSpaces {
					for kind, d := range pb.measure(ctx, s, lv.inNamespace, on, &wrong, benchTodayKinds) {
						got[cellKey(s, kind)] = append(got[cellKey(s, kind)], d...)
					}
					pb.measureOptIn(ctx, s, lv.inNamespace, on, got, &wrong)
				}
			}
		}
		pb.setPolicy(ctx, true)
		rows = append(rows, r)
		for _, s := range benchSpaces {
			for _, kind := range benchKinds {
				if c := cellKey(s, kind); len(r.on[c]) > 0 {
					b.ReportMetric(msOf(durMedian(r.on[c])-durMedian(r.off[c])),
						fmt.Sprintf("ms-added-%s-%s-%d-%d", strings.ReplaceAll(s.label(), " ", ""), strings.NewReplacer(" ", "", ",", "", ":", "").Replace(kind), r.level, r.total))
				}
			}
		}
	}
	if wrong > 0 {
		b.Errorf("kube-apiserver %s: %d pods did not get exactly the hint they should (the term of their identity's node, or none)", release, wrong)
	}
	return rows
}

func spaceNames() []string {
	var out []string
	for _, s := range benchSpaces {
		out = append(out, s.name)
	}
	return out
}

// benchProbeNS holds one identity, identity:db-0, whose hint shows whether
// the policy is in force (levels with no identity in the measured
// namespaces show nothing).
const benchProbeNS = "bench-probe"

type placementBench struct {
	b       *testing.B
	cs      *kubernetes.Clientset
	writer  *kubernetes.Clientset // the index's writes, as stickyip-controller makes them
	binding *admissionv1.MutatingAdmissionPolicyBinding
	serial  int
	optIn   benchOptIn // placement_bench_optin_test.go
	// shards are each namespace's shards as last written; filled, how many
	// identities each holds.
	shards map[string][]index.Shard
	filled map[string]int
}

func benchNode(i int) string { return fmt.Sprintf("bnode-%02d", i) }

// benchNS is the i-th namespace past the measured ones.
func benchNS(i int) string { return fmt.Sprintf("bench-%02d", i) }

// holderOf is the node that holds the k-th identity of a namespace: spread
// so that each shard names every node, as a StatefulSet's pods spread over
// a cluster's nodes put them.
func holderOf(k int) int { return (k + k/benchNodes) % benchNodes }

// fill makes namespace ns's index hold the first n identities of form s
// (keyed identities, each on its holderOf's node), as stickyip-controller
// writes it: controller/index packs their keys (one stays in its shard, a
// new one goes into the lowest-numbered shard with room under
// placementv1.ShardBytes), and it creates a ConfigMap shard of the keyed
// series or patches one with the keys that changed (a JSON merge patch).
func (pb *placementBench) fill(ctx context.Context, ns string, s benchSpace, n int) {
	if pb.filled == nil {
		pb.filled = map[string]int{}
	}
	if pb.filled[ns] >= n {
		return
	}
	want := make(map[string]string, n)
	for k := range n {
		want[s.key(k, false)] = benchNode(holderOf(k))
	}
	have := pb.shards[ns]
	packed := index.Pack(have, want, placementv1.ShardBytes)
	cms := pb.writer.CoreV1().ConfigMaps(ns)
	for _, w := range index.Diff(have, packed) {
		name := placementv1.ShardName(placementv1.Keyed, w.Number)
		var err error
		switch w.Op {
		case index.Create:
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{placementv1.IndexLabel: placementv1.Keyed}},
				Data:       w.Nodes}, metav1.CreateOptions{})
		case index.Patch:
			var body []byte
			if body, err = w.MergePatch(); err == nil {
				_, err = cms.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
			}
		default:
			err = fmt.Errorf("unexpected %s", w.Op)
		}
		if err != nil {
			pb.b.Fatalf("write %s/%s (%s, %d identities in the namespace): %v", ns, name, w.Op, n, err)
		}
	}
	pb.shards[ns] = nil
	for _, num := range slices.Sorted(maps.Keys(packed)) {
		pb.shards[ns] = append(pb.shards[ns], index.Shard{Number: num, Nodes: packed[num]})
	}
	pb.filled[ns] = n
}

// shardSizes says how many shards each measured namespace has and how
// large they are as stored (managedFields included).
func (pb *placementBench) shardSizes(ctx context.Context) string {
	var out []string
	for _, s := range benchSpaces {
		var bytes, fields int
		for _, sh := range pb.shards[s.name] {
			raw, err := pb.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces", s.name, "configmaps",
				placementv1.ShardName(placementv1.Keyed, sh.Number)).DoRaw(ctx)
			if err != nil {
				pb.b.Fatal(err)
			}
			bytes += len(raw)
			if i := strings.Index(string(raw), `"managedFields"`); i >= 0 {
				fields += len(raw) - i // managedFields come last in metadata, before data: an upper bound
				if j := strings.Index(string(raw[i:]), `"data"`); j >= 0 {
					fields -= len(raw) - i - j
				}
			}
		}
		out = append(out, fmt.Sprintf("%s: %d shards, %d bytes as read (managedFields %d)", s.name, len(pb.shards[s.name]), bytes, fields))
	}
	return strings.Join(out, "; ")
}

// waitIndexed waits until the API server's hint sees the last identity
// written in each measured namespace (its parameter informer lags the
// writes).
func (pb *placementBench) waitIndexed(ctx context.Context, n int) {
	if n == 0 {
		return
	}
	for _, s := range benchSpaces {
		eventually(pb.b, fmt.Sprintf("the hint seeing %s's identity %d", s.name, n-1), time.Minute, 200*time.Millisecond, func() (bool, string) {
			p := pb.pod(s, "held", s.key(n-1, false), true)
			got, err := pb.cs.CoreV1().Pods(s.name).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err.Error()
			}
			return hasOnly(got, benchNode(holderOf(n-1)), false), fmt.Sprint(got.Spec.Affinity)
		})
	}
}

// setPolicy puts the placement hint's binding (and the opt-in's) in place
// or removes it, and waits until the API server acts accordingly: the
// probe namespace's held pod gets the hint, or not.
func (pb *placementBench) setPolicy(ctx context.Context, on bool) {
	b := pb.b
	pb.setOptIn(ctx, on)
	bindings := pb.cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings()
	if on {
		nb := pb.binding.DeepCopy()
		nb.ResourceVersion, nb.UID = "", ""
		if _, err := bindings.Create(ctx, nb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	} else if err := bindings.Delete(ctx, placementBindingName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Fatal(err)
	}
	eventually(b, fmt.Sprintf("placement policy %s", map[bool]string{true: "on", false: "off"}[on]), time.Minute, 200*time.Millisecond, func() (bool, string) {
		p := pb.pod(benchSpace{}, "held", "db-0", true)
		p.Namespace = benchProbeNS
		got, err := pb.cs.CoreV1().Pods(benchProbeNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		hinted := got.Spec.Affinity != nil
		return hinted == on, fmt.Sprintf("hint %v", got.Spec.Affinity)
	})
}

// pod is a pod of kind (held, held-required, not held, plain) of namespace
// s with stickyip.io/identity key, unbound, created under a unique name.
func (pb *placementBench) pod(s benchSpace, kind, key string, dryRun bool) *corev1.Pod {
	pb.serial++
	p := testPod(fmt.Sprintf("p-%d", pb.serial), nil)
	p.Namespace, p.Spec.NodeName = s.name, ""
	p.Labels = map[string]string{"bench": "pod"}
	switch kind {
	case "held", "not held":
		p.Annotations = map[string]string{annReservation: "10m", annIdentity: key}
	case "held, required":
		p.Annotations = map[string]string{annReservation: "10m", annIdentity: key, annPlacement: "required"}
	}
	if dryRun {
		p.Name = ""
		p.GenerateName = "dry-"
	}
	return p
}

// measure creates benchPods pods of each of kinds in s and returns the
// time each creation took; with the policy on, each held pod must carry
// exactly the term of its identity's node, every other pod none (counted
// in wrong otherwise).
func (pb *placementBench) measure(ctx context.Context, s benchSpace, n int, on bool, wrong *int, kinds []string) map[string][]time.Duration {
	b := pb.b
	out := map[string][]time.Duration{}
	pods := pb.cs.CoreV1().Pods(s.name)
	for i := range benchPods {
		for _, kind := range kinds {
			if strings.HasPrefix(kind, "held") && n == 0 {
				continue
			}
			k := (i*7919 + pb.serial) % max(n, 1)
			key := s.key(k, kind == "not held")
			p := pb.pod(s, kind, key, false)
			start := time.Now()
			got, err := pods.Create(ctx, p, metav1.CreateOptions{})
			d := time.Since(start)
			if err != nil {
				b.Fatalf("create %s/%s: %v", s.name, p.Name, err)
			}
			out[kind] = append(out[kind], d)
			switch {
			case !on || !strings.HasPrefix(kind, "held"):
				if got.Spec.Affinity != nil { // a pod the index holds nothing for, or the policy off: untouched
					*wrong++
					b.Logf("%s pod %s/%s (identity %d), policy on %v: affinity %v, want none", kind, s.name, p.Name, k, on, got.Spec.Affinity)
				}
			case !hasOnly(got, benchNode(holderOf(k)), kind == "held, required"):
				*wrong++
				b.Logf("%s pod %s/%s (identity %d): affinity %v, want exactly the term for %s", kind, s.name, p.Name, k, got.Spec.Affinity, benchNode(holderOf(k)))
			}
		}
	}
	pb.deletePods(ctx, s.name)
	return out
}

// deletePods deletes the pods the benchmark made in ns.
func (pb *placementBench) deletePods(ctx context.Context, ns string) {
	zero := int64(0)
	if err := pb.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: benchPodLabel}); err != nil {
		pb.b.Fatal(err)
	}
}

// durMedian is the median of ds (0 when empty).
func durMedian(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
