//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/test/harness"
	"path/filepath"
)

// Placement benchmark (make bench-placement): what the placement policy adds
// to a pod creation as the placement index grows, on a real kube-apiserver
// (Node,RBAC, NodeRestriction) with deploy/placement applied.
const (
	benchNamespace  = "bench"     // the namespace measured; it holds the identities db-0 … db-<n-1>
	benchNamespaces = 100         // namespaces holding identities at the last level
	benchNodes      = 100         // Node objects the entries name
	benchRounds     = 3           // alternations of policy on and off per level
	benchPods       = 40          // pod creations per kind, round and setting
	benchPodLabel   = "bench=pod" // every pod the benchmark creates
)

// benchLevels are the index sizes measured: identities in the measured
// namespace and in the whole cluster.
var benchLevels = []struct{ inNamespace, total int }{{0, 0}, {1000, 1000}, {10000, 10000}, {10000, 50000}, {30000, 70000}}

// benchKinds are the pods measured: a pod whose identity the index holds
// (the preferred hint, and with stickyip.io/placement: required the required
// one), one that reserves its IP without an entry, one without any stickyip
// annotation; then the namespace opt-in's (placement_bench_optin_test.go).
var benchKinds = append(benchTodayKinds[:len(benchTodayKinds):len(benchTodayKinds)], benchPlainFields, benchOptInMarked, benchOptInUnmarked,
	benchOptInBound+"held", benchOptInUnbound+"held", benchOptInBound+"plain", benchOptInUnbound+"plain")

// benchPlainFields is a plain pod created while the namespace's shards
// carry managedFields (a field manager's entry naming every node's key and
// reference), as every shard did before issue 47; since, no node's write
// leaves any (stickyip-placement-fields), and the other kinds are measured
// so. kube-apiserver 1.36 converts each shard for each of the hint's
// invocations (one per shard) before its match condition, for every pod of
// the namespace; its informers drop managedFields (issue 47: this row shows
// they are not where a plain pod's time goes; BenchmarkShardConversion in
// deploy/policycheck shows where it does).
const benchPlainFields = "plain, shards with managedFields"

// benchTodayKinds are the pods measure creates.
var benchTodayKinds = []string{"held", "held, required", "not held", "plain"}

// BenchmarkPlacementAdmission prints the median time of a pod creation
// (POST, from the client) with the placement policy's binding in place and
// removed, on the same API server in the same run, for each of benchKinds,
// at 0, 1,000, 10,000 and 30,000 identities in the measured namespace and
// up to 70,000 across 100 namespaces, on each supported minor (1.37, 1.36:
// one table, side by side). Every held pod created with the policy on must
// get exactly the term (preferred, or required) for its entry's node, and
// every other pod none: the benchmark fails otherwise (a fast wrong answer
// is no answer).
func BenchmarkPlacementAdmission(b *testing.B) {
	results := map[string][]admissionRow{}
	for _, release := range []string{defaultK8sRelease, "1.36"} {
		b.Run(release, func(b *testing.B) { results[release] = measureAdmission(b, binsOf(b, release), release) })
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nPod creation (POST, client round trip), median of %d per cell; policy off = its binding removed, same server, same run\n\n", benchRounds*benchPods)
	fmt.Fprintf(&out, "| identities (namespace / cluster) | pod | 1.37: off | on | added | 1.36: off | on | added |\n|---|---|---|---|---|---|---|---|\n")
	r37, r36 := results[defaultK8sRelease], results["1.36"]
	for i, r := range r37 {
		for _, kind := range benchKinds {
			if len(r.on[kind]) == 0 {
				continue // no identity held yet
			}
			fmt.Fprintf(&out, "| %d / %d | %s | %s |", r.level, r.total, kind, r.cells(kind))
			if i < len(r36) {
				fmt.Fprintf(&out, " %s |", r36[i].cells(kind))
			}
			out.WriteString("\n")
		}
	}
	b.Log(out.String())
}

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
// policy off and on, by kind.
type admissionRow struct {
	level, total int
	off, on      map[string][]time.Duration
}

// cells are "off | on | added" of kind, in milliseconds.
func (r admissionRow) cells(kind string) string {
	off, on := median(r.off[kind]), median(r.on[kind])
	return fmt.Sprintf("%.2f ms | %.2f ms | **%+.2f ms**", ms(off), ms(on), ms(on-off))
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
	nodes := make([]types.UID, benchNodes)
	for i := range nodes {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: benchNode(i)}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = n.UID
	}
	for i := range benchNamespaces {
		cp.ensureNamespace(benchNS(i))
	}
	cp.ensureNamespace(benchProbeNS)
	binding, err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Get(ctx, placementBindingName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bench := &placementBench{b: b, cs: cs, nodes: nodes, binding: binding}
	bench.fill(ctx, -1, 1, map[int]int{}) // the probe: one identity the policy's state is seen by
	var rows []admissionRow
	wrong := 0
	filled := map[int]int{} // namespace index → identities written
	for _, lv := range benchLevels {
		start := time.Now()
		bench.fill(ctx, 0, lv.inNamespace, filled)
		for i := 1; lv.total > lv.inNamespace && i < benchNamespaces; i++ {
			rest := lv.total - lv.inNamespace
			bench.fill(ctx, i, rest/(benchNamespaces-1)+min(1, max(0, rest%(benchNamespaces-1)-i+1)), filled)
		}
		total := 0
		for _, k := range filled {
			total += k
		}
		b.Logf("%s: index: %d identities in %s, %d in the cluster (written in %s)", release, lv.inNamespace, benchNamespace, total,
			time.Since(start).Round(time.Millisecond))
		r := admissionRow{level: lv.inNamespace, total: total, off: map[string][]time.Duration{}, on: map[string][]time.Duration{}}
		bench.setFields(ctx, false) // as the nodes leave them
		for round := range benchRounds {
			for _, on := range []bool{round%2 == 0, round%2 != 0} {
				bench.setPolicy(ctx, on)
				got := r.off
				if on {
					got = r.on
				}
				for kind, d := range bench.measure(ctx, lv.inNamespace, on, &wrong, benchTodayKinds) {
					got[kind] = append(got[kind], d...)
				}
				bench.measureOptIn(ctx, lv.inNamespace, on, got, &wrong) // issue 39
			}
		}
		if lv.inNamespace > 0 { // issue 47: where a plain pod's time went on 1.36
			bench.setFields(ctx, true)
			for round := range benchRounds {
				for _, on := range []bool{round%2 == 0, round%2 != 0} {
					bench.setPolicy(ctx, on)
					got := r.off
					if on {
						got = r.on
					}
					got[benchPlainFields] = append(got[benchPlainFields], bench.measure(ctx, lv.inNamespace, on, &wrong, []string{"plain"})["plain"]...)
				}
			}
		}
		bench.setPolicy(ctx, true)
		rows = append(rows, r)
		for _, kind := range benchKinds {
			if len(r.on[kind]) > 0 {
				b.ReportMetric(ms(median(r.on[kind])-median(r.off[kind])),
					fmt.Sprintf("ms-added-%s-%d-%d", strings.NewReplacer(" ", "", ",", "").Replace(kind), r.level, r.total))
			}
		}
	}
	if wrong > 0 {
		b.Errorf("kube-apiserver %s: %d pods did not get exactly the hint they should (the term of their entry's node, or none)", release, wrong)
	}
	return rows
}

// benchProbeNS holds one identity, identity:db-0, whose hint shows whether
// the policy is in force (levels with no identity in the measured namespace
// show nothing).
const benchProbeNS = "bench-probe"

type placementBench struct {
	b       *testing.B
	cs      *kubernetes.Clientset
	nodes   []types.UID
	binding *admissionv1.MutatingAdmissionPolicyBinding
	serial  int
	optIn   benchOptIn // issue 39: placement_bench_optin_test.go
	// applied are the measured namespace's shards as last applied (with
	// managedFields: setFields).
	applied map[string]*corev1ac.ConfigMapApplyConfiguration
}

func benchNode(i int) string { return fmt.Sprintf("bnode-%02d", i) }

// benchSince is the entries' claim time.
var benchSince = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

func benchNS(i int) string {
	switch i {
	case -1:
		return benchProbeNS
	case 0:
		return benchNamespace
	}
	return fmt.Sprintf("%s-%02d", benchNamespace, i)
}

// holderOf is the node that holds identity:db-<i>: spread so that each
// shard holds entries of every node, as a StatefulSet's pods spread over a
// cluster's nodes put them (issue 47: the shard of identity:db-<i> follows
// the last two digits of i, and a holder that did too put about 12 nodes in
// each shard, whose 1.36 cost grows with its nodes).
func holderOf(i int) int { return (i + i/benchNodes) % benchNodes }

// fill gives namespace i the identities identity:db-0 … identity:db-<n-1>
// as the nodes would (each node's entries under its own key of each shard,
// each shard owned by the nodes with entries there), written as admin,
// one write per shard.
func (pb *placementBench) fill(ctx context.Context, i, n int, filled map[int]int) {
	if filled[i] >= n {
		return
	}
	ns := benchNS(i)
	lines := map[string]map[int][]placement.Line{} // shard → node → entries
	for k := range n {
		id := fmt.Sprintf("identity:db-%d", k)
		s := placement.ShardOf(id)
		if lines[s] == nil {
			lines[s] = map[int][]placement.Line{}
		}
		lines[s][holderOf(k)] = append(lines[s][holderOf(k)], placement.Line{Identity: id, Pod: fmt.Sprintf("db-%d-x", k),
			Seq: 1, Since: benchSince, IPs: []string{fmt.Sprintf("10.%d.%d.%d", 100+i%100, k/250, k%250+1)}})
	}
	for _, s := range slices.Sorted(maps.Keys(lines)) {
		cm := corev1ac.ConfigMap(s, ns).WithLabels(map[string]string{placement.IndexLabel: strings.TrimPrefix(s, placement.ShardPrefix)})
		data := map[string]string{}
		for _, o := range slices.Sorted(maps.Keys(lines[s])) {
			data[benchNode(o)] = entry.FormatValue(lines[s][o])
			cm.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Node").WithName(benchNode(o)).WithUID(pb.nodes[o]))
		}
		cm.WithData(data)
		if _, err := pb.cs.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "bench", Force: true}); err != nil {
			pb.b.Fatalf("write %s/%s: %v", ns, s, err)
		}
		if i == 0 {
			if pb.applied == nil {
				pb.applied = map[string]*corev1ac.ConfigMapApplyConfiguration{}
			}
			pb.applied[s] = cm
		}
	}
	filled[i] = n
}

// setFields gives the measured namespace's shards the managedFields of the
// administrator's server-side apply that wrote them (keep), as every
// node's write left a shard before issue 47, or none, as since.
func (pb *placementBench) setFields(ctx context.Context, keep bool) {
	cms := pb.cs.CoreV1().ConfigMaps(benchNamespace)
	for _, s := range slices.Sorted(maps.Keys(pb.applied)) {
		var err error
		if keep {
			_, err = cms.Apply(ctx, pb.applied[s], metav1.ApplyOptions{FieldManager: "bench", Force: true})
		} else {
			_, err = cms.Patch(ctx, s, types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`), metav1.PatchOptions{})
		}
		if err != nil {
			pb.b.Fatalf("managedFields of %s/%s (keep %v): %v", benchNamespace, s, keep, err)
		}
	}
	var size int
	for s := range pb.applied {
		cm, err := cms.Get(ctx, s, metav1.GetOptions{})
		if err != nil {
			pb.b.Fatal(err)
		}
		size += managedSize(cm)
	}
	pb.b.Logf("%s: managedFields of its %d shards: %d bytes", benchNamespace, len(pb.applied), size)
}

// setPolicy puts the placement policy's binding in place or removes it, and
// waits until the API server acts accordingly: the probe namespace's held
// pod gets the hint, or not.
func (pb *placementBench) setPolicy(ctx context.Context, on bool) {
	b := pb.b
	pb.setOptIn(ctx, on) // issue 39: the namespace opt-in's binding with the hint's
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
		p := pb.pod("held", "db-0", true)
		p.Namespace = benchProbeNS
		got, err := pb.cs.CoreV1().Pods(benchProbeNS).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		hinted := got.Spec.Affinity != nil
		return hinted == on, fmt.Sprintf("hint %v", got.Spec.Affinity)
	})
}

// pod is a pod of kind (held, not held, plain) for identity id, unbound,
// created under a unique name.
func (pb *placementBench) pod(kind, id string, dryRun bool) *corev1.Pod {
	pb.serial++
	p := testPod(fmt.Sprintf("p-%d", pb.serial), nil)
	p.Namespace, p.Spec.NodeName = benchNamespace, ""
	p.Labels = map[string]string{"bench": "pod"}
	switch kind {
	case "held", "not held":
		p.Annotations = map[string]string{annReservation: "10m", annIdentity: id}
	case "held, required":
		p.Annotations = map[string]string{annReservation: "10m", annIdentity: id, annPlacement: "required"}
	}
	if dryRun {
		p.Name = ""
		p.GenerateName = "dry-"
	}
	return p
}

// measure creates benchPods pods of each of kinds and returns the time
// each creation took; with the policy on, each held pod must carry exactly
// the term of its entry's node (counted in wrong otherwise).
func (pb *placementBench) measure(ctx context.Context, n int, on bool, wrong *int, kinds []string) map[string][]time.Duration {
	b := pb.b
	out := map[string][]time.Duration{}
	pods := pb.cs.CoreV1().Pods(benchNamespace)
	for i := range benchPods {
		for _, kind := range kinds {
			if strings.HasPrefix(kind, "held") && n == 0 {
				continue
			}
			k := (i*7919 + pb.serial) % max(n, 1)
			id := fmt.Sprintf("db-%d", k)
			if kind == "not held" {
				id = fmt.Sprintf("gone-%d", k)
			}
			p := pb.pod(kind, id, false)
			start := time.Now()
			got, err := pods.Create(ctx, p, metav1.CreateOptions{})
			d := time.Since(start)
			if err != nil {
				b.Fatalf("create %s: %v", p.Name, err)
			}
			out[kind] = append(out[kind], d)
			switch {
			case !on || !strings.HasPrefix(kind, "held"):
				if got.Spec.Affinity != nil { // a pod the index holds nothing for, or the policy off: untouched
					*wrong++
					b.Logf("%s pod of %s, policy on %v: affinity %v, want none", kind, id, on, got.Spec.Affinity)
				}
			case !hasOnly(got, benchNode(holderOf(k)), kind == "held, required"):
				*wrong++
				b.Logf("%s pod of %s: affinity %v, want exactly the term for %s", kind, id, got.Spec.Affinity, benchNode(holderOf(k)))
			}
		}
	}
	zero := int64(0)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: benchPodLabel}); err != nil {
		b.Fatal(err)
	}
	return out
}

// hasOnly reports whether p's node affinity is exactly the hint's term for
// node: the preferred one, or with required a required term of it alone.
func hasOnly(p *corev1.Pod, node string, required bool) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return false
	}
	want := []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}
	if required {
		r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		return a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution == nil && r != nil && len(r.NodeSelectorTerms) == 1 &&
			fmt.Sprint(r.NodeSelectorTerms[0].MatchFields) == fmt.Sprint(want) && len(r.NodeSelectorTerms[0].MatchExpressions) == 0
	}
	terms := a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(terms) == 1 && terms[0].Weight == placementWeight &&
		fmt.Sprint(terms[0].Preference.MatchFields) == fmt.Sprint(want)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
