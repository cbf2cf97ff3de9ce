package policycheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// The cost side of the mutating policies, which kube-apiserver evaluates at
// every pod creation of a namespace with an index (issue 50). The API
// server has no estimated-cost check for admission policies (only CRD
// validation rules have one, over typed schemas; here object and params
// are dynamic, and a static estimate is unbounded): it bounds them at run
// time, each expression and variable by celconfig.PerCallLimit (the CEL
// programs carry it) and a policy's invocation by RuntimeCELCostBudget
// (RuntimeCELCostBudgetMatchConditions for its match conditions). Over
// either, the invocation fails, and under failurePolicy Ignore the pod is
// created without its hint and nothing says so to its owner. So the check
// runs each policy through the API server's own evaluators on the most
// expensive shards the API server lets exist: a ConfigMap holds at most
// 1 MiB of data (core.MaxSecretSize, its validation), a node's value at
// most 16384 characters (index-policy.yaml), a cluster at most 5,000 nodes
// (Kubernetes' largest supported cluster).

const (
	maxShardData = 1 << 20 // a ConfigMap's data, as the API server validates it
	maxNodeValue = 16384   // a node's entries in a shard, as the index policy takes them
	maxNodes     = 5000    // Kubernetes' largest supported cluster
)

// invocation is one evaluation of a mutating policy for a pod's creation,
// with one parameter (nil: the binding without paramRef).
type invocation struct {
	pod       *corev1.Pod
	shard     *corev1.ConfigMap
	namespace *corev1.Namespace
	costOnly  bool // evaluate, do not patch
}

// admit evaluates c for inv as the mutating admission plugin's dispatcher
// does (mutate), for a pod's creation by the StatefulSet controller.
func admit(t testing.TB, c *compiled, inv invocation) podOutcome {
	t.Helper()
	var params runtime.Object
	if inv.shard != nil {
		params = inv.shard
	}
	o := mutate(t, c, request{
		op: admission.Create, kind: corev1.SchemeGroupVersion.WithKind("Pod"), resource: corev1.SchemeGroupVersion.WithResource("pods"),
		user: &user.DefaultInfo{Name: "system:serviceaccount:kube-system:statefulset-controller", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
		obj:  inv.pod, params: params, namespace: inv.namespace,
	}, inv.costOnly)
	p, ok := o.obj.(*corev1.Pod)
	if !ok {
		t.Fatalf("the patcher made a %T", o.obj)
	}
	return podOutcome{o, p}
}

// podOutcome is an outcome whose object is a pod.
type podOutcome struct {
	outcome
	pod *corev1.Pod
}

// shardOf builds shard ns/<identity's shard> as the index holds it: every
// node of values owns it (a v1 Node reference), each node's value its
// lines; rv is its resourceVersion.
func shardOf(ns, identity string, values map[string][]entry.Line, rv uint64) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: placement.ShardOf(identity), ResourceVersion: fmt.Sprint(rv),
			Labels: map[string]string{placement.IndexLabel: strings.TrimPrefix(placement.ShardOf(identity), placement.ShardPrefix)}},
		Data: map[string]string{},
	}
	for _, n := range slices.Sorted(mapsKeys(values)) {
		cm.Data[n] = entry.FormatValue(values[n])
		cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n, UID: types.UID("uid-" + n)})
	}
	return cm
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dataSize is the size the API server counts for a ConfigMap's data.
func dataSize(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	return n
}

// fillers returns n identities of shard's, other than skip.
func fillers(shard, skip string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("app-%d", i)
		if id != skip && placement.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

var since = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

func line(id string, seq uint64, ip string) entry.Line {
	return entry.Line{Identity: id, Pod: id, Seq: seq, Since: since, IPs: []string{ip}}
}

// fullShard is shard of target with nodes nodes, each value filled with
// other identities of the shard up to the limits (a value's, the data's),
// the first listers of them also listing target (target's line last among
// theirs: the scan reads the whole value), the last of them with the
// largest seq. It returns the shard and the node the hint must name.
func fullShard(ns, target string, nodes, listers int) (*corev1.ConfigMap, string) {
	perNode := min(maxNodeValue, maxShardData/nodes-32)
	values := map[string][]entry.Line{}
	ids := fillers(placement.ShardOf(target), target, 1+perNode/60)
	seq := uint64(1000)
	want := ""
	for n := range nodes {
		name := fmt.Sprintf("node-%04d", n)
		var lines []entry.Line
		size := 0
		if n < listers {
			seq++
			l := line(target, seq, fmt.Sprintf("10.%d.%d.9", n/250, n%250))
			lines, size, want = append(lines, l), len(l.String()), name
		}
		for _, id := range ids {
			l := line(id, 1+uint64(n), fmt.Sprintf("10.%d.%d.%d", n/250, n%250, 1+len(lines)%250))
			if size+1+len(l.String()) > perNode {
				break
			}
			lines, size = append(lines, l), size+1+len(l.String())
		}
		values[name] = lines
	}
	return shardOf(ns, target, values, seq+1), want
}

// hinted returns the nodes a pod's affinity names through the hint's
// term (matchFields metadata.name In), required and preferred.
func hinted(p *corev1.Pod) (required, preferred []string) {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil, nil
	}
	if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
		for _, term := range r.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" {
					required = append(required, f.Values...)
				}
			}
		}
	}
	for _, term := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		for _, f := range term.Preference.MatchFields {
			if f.Key == "metadata.name" {
				preferred = append(preferred, f.Values...)
			}
		}
	}
	return required, preferred
}

// stsPod is a StatefulSet's pod db-0 in ns, not yet scheduled, with
// annotations, and two required node selector terms of its own (the hint
// ANDs into each: the longest of its patches).
func stsPod(ns string, annotations map[string]string) *corev1.Pod {
	yes := true
	term := func(os string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{os}}}}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-0", Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "uid-db", Controller: &yes}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "db", Image: "db"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{term("linux"), term("plan9")}}}},
		},
	}
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// The hint and the namespace opt-in stay within the API server's CEL
// limits on the most expensive shards it lets exist, and still name the
// node: a shard at the ConfigMap limit with values at the index policy's
// limit, the same 1 MiB over the largest cluster's 5,000 nodes, each with
// 8 nodes listing the pod's identity. Each invocation's cost is printed
// (FIGURE hint cost).
func TestHintWithinCELCostLimits(t *testing.T) {
	ps := load(t)
	hint := compileMutating(t, ps.mutating["stickyip-placement"])
	optin := compileMutating(t, ps.mutating["stickyip-statefulsets"])
	for _, c := range []*compiled{hint, optin} {
		for _, err := range c.errs {
			t.Fatal(err)
		}
	}
	plain := namespace("db", nil)
	labelled := namespace("db", map[string]string{"stickyip.io/statefulsets": "10m-required"})
	for _, shape := range []struct {
		name           string
		nodes, listers int
	}{
		{"1 MiB in 64 values of 16384 characters", maxShardData / maxNodeValue, 8},
		{"1 MiB over 5,000 nodes", maxNodes, 8},
	} {
		shard, want := fullShard("db", "db-0", shape.nodes, shape.listers)
		if n := dataSize(shard); n > maxShardData {
			t.Fatalf("%s: the fixture holds %d bytes, more than a ConfigMap may", shape.name, n)
		}
		for _, run := range []struct {
			name     string
			policy   *compiled
			inv      invocation
			required bool
		}{
			{"hint, preferred", hint, invocation{pod: stsPod("db", map[string]string{"io.kubernetes.cri/reserved-ip-duration": "10"}), shard: shard, namespace: plain}, false},
			{"hint, required", hint, invocation{pod: stsPod("db", map[string]string{"io.kubernetes.cri/reserved-ip-duration": "10", "stickyip.io/placement": "required"}), shard: shard, namespace: plain}, true},
			{"opt-in's hint, required by the namespace", optin, invocation{pod: stsPod("db", nil), shard: shard, namespace: labelled}, true},
		} {
			o := admit(t, run.policy, run.inv)
			if o.matchErr != nil || o.mutationErr != nil {
				t.Errorf("%s, %s: the API server fails the invocation: match %v, mutation %v (costs %d, %d)", shape.name, run.name, o.matchErr, o.mutationErr, o.matchCost, o.mutationCost)
				continue
			}
			required, preferred := hinted(o.pod)
			wantRequired, wantPreferred := []string(nil), []string{want}
			if run.required {
				wantRequired, wantPreferred = []string{want, want}, nil
			}
			if !o.matched || !slices.Equal(required, wantRequired) || !slices.Equal(preferred, wantPreferred) {
				t.Errorf("%s, %s: matched %v, the pod's terms name required %v, preferred %v; want %v, %v", shape.name, run.name, o.matched, required, preferred, wantRequired, wantPreferred)
				continue
			}
			t.Logf("FIGURE hint cost: %s (%d bytes), %s: match conditions %d of %d, variables and mutation %d of %d",
				shape.name, dataSize(shard), run.name, o.matchCost, celconfig.RuntimeCELCostBudgetMatchConditions, o.mutationCost, celconfig.RuntimeCELCostBudget)
		}
	}
}

// How many nodes may list one identity before the hint's lookup goes over
// the API server's limits (each listing node's reference looked up among
// the shard's owners, the latest claim among the listers: quadratic in
// them): printed (FIGURE hint listers), and required to be at least 100,
// more than the nodes that hold one pod's reservation (an identity is one
// pod; a node it ran on keeps its reservation for its duration). The
// opt-in's lookup is the same expression.
func TestHintListersWithinCELCostLimits(t *testing.T) {
	t.Parallel()
	hint := compileMutating(t, load(t).mutating["stickyip-placement"])
	pod := func() *corev1.Pod {
		return stsPod("db", map[string]string{"io.kubernetes.cri/reserved-ip-duration": "10"})
	}
	ok := func(listers int, costOnly bool) (bool, podOutcome) {
		values := map[string][]entry.Line{}
		for n := range listers {
			values[fmt.Sprintf("node-%04d", n)] = []entry.Line{line("db-0", 1000+uint64(n), fmt.Sprintf("10.%d.%d.9", n/250, n%250))}
		}
		o := admit(t, hint, invocation{pod(), shardOf("db", "db-0", values, 1000+uint64(listers)), namespace("db", nil), costOnly})
		_, preferred := hinted(o.pod)
		return o.matchErr == nil && o.mutationErr == nil && (costOnly || slices.Equal(preferred, []string{fmt.Sprintf("node-%04d", listers-1)})), o
	}
	// From 100 up, doubling, then halving the gap to within 5%: the
	// evaluations near the limit cost the most (about 0.3 s each here).
	lo, hi := 0, 0
	for k := 100; hi == 0; k *= 2 {
		k = min(k, maxNodes)
		if good, o := ok(k, k == 100); !good {
			if k == 100 {
				t.Fatalf("the hint's lookup fails with %d nodes listing one identity: match %v, mutation %v", k, o.matchErr, o.mutationErr)
			}
			hi = k
		} else if lo = k; k == maxNodes {
			break
		}
	}
	for hi > 0 && hi-lo > max(1, lo/20) {
		mid := (lo + hi) / 2
		if good, _ := ok(mid, true); good {
			lo = mid
		} else {
			hi = mid
		}
	}
	good, o := ok(lo, false)
	if !good {
		t.Fatalf("%d nodes listing one identity: the hint names %v (match %v, mutation %v)", lo, o.pod.Spec.Affinity, o.matchErr, o.mutationErr)
	}
	why := "as many as the largest cluster has"
	if hi > 0 {
		_, over := ok(hi, true)
		why = fmt.Sprintf("with %d: %v", hi, clip(fmt.Sprint(over.mutationErr)))
		if i := strings.LastIndex(fmt.Sprint(over.mutationErr), "composited variable"); i >= 0 {
			why = fmt.Sprintf("with %d: %s", hi, fmt.Sprint(over.mutationErr)[i:])
		}
	}
	t.Logf("FIGURE hint listers: the hint names the latest of %d nodes listing one identity within the API server's CEL limits (cost %d of %d); fails %s", lo, o.mutationCost, celconfig.RuntimeCELCostBudget, why)
}
