package policycheck

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// The index's policies judge every write of a shard, and kube-apiserver
// bounds their CEL at run time as it bounds the hint's (cost_test.go): each
// expression and variable within PerCallLimit, the match conditions within
// RuntimeCELCostBudgetMatchConditions, the rest of an invocation within
// RuntimeCELCostBudget (a validating policy's message expressions, which
// it evaluates at every call, within what its validations left: past it,
// every validation of the call fails). Past a limit, the index policy
// (failurePolicy Fail) refuses the write whatever it holds — an honest
// node's claims, the garbage collector's removal of a deleted Node's
// reference — and the mutating ones (failurePolicy Ignore) do nothing,
// silently: a node's managedFields stay (the index policy then refuses its
// writes), a removed node's entries stay and its reference's UID is not
// recorded. So each runs here through the API server's own evaluators on
// the most expensive writes the index lets happen (issue 50).

const (
	indexNS    = "db"
	indexShard = "stickyip-index-0"
	indexRV    = 100 // the shard's resourceVersion before the write
	// listers bounds the nodes listing one identity in the fixtures: more
	// than the hint itself can judge (TestHintListersWithinCELCostLimits:
	// beyond about 450, that identity's hint is lost).
	listers = 500
)

var indexNamespace = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: indexNS, UID: "7d1c4a0e-5b8f-4f7e-9c3a-2b6d8e1f0a94"}}

// uuid is a made-up UUID for name, as a Node's UID is one.
func uuid(name string) types.UID {
	h := fnv.New64a()
	h.Write([]byte(name))
	s := h.Sum64()
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(s>>32), uint16(s>>16), uint16(s)&0xfff, uint16(s>>20)&0xfff, s&0xffffffffffff))
}

// shortIdentities returns every identity of shard of one to three
// characters, shortest first: the most lines a value can hold, the most
// work per character for the policy.
func shortIdentities(shard string) []string {
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyz"
	var names []string
	for _, a := range alnum {
		names = append(names, string(a))
	}
	for _, a := range alnum {
		for _, b := range alnum {
			names = append(names, string(a)+string(b))
		}
	}
	for _, a := range alnum {
		for _, m := range "-" + alnum {
			for _, b := range alnum {
				names = append(names, string(a)+string(m)+string(b))
			}
		}
	}
	return slices.DeleteFunc(names, func(id string) bool { return placement.ShardOf(id) != shard })
}

// shortLine is a running pod-name identity's line, its fields as short as
// they may be; n varies its address.
func shortLine(id string, seq uint64, n int) entry.Line {
	return entry.Line{Identity: id, Pod: id, Seq: seq, Since: since.Truncate(time.Second),
		IPs: []string{fmt.Sprintf("10.%d.%d.%d", n/65536%256, n/256%256, n%256)}}
}

// value is a node's lines and the length of their value.
type value struct {
	lines []entry.Line
	size  int
}

// add appends l if the value stays within limit characters.
func (v *value) add(l entry.Line, limit int) bool {
	n := len(l.String())
	if len(v.lines) > 0 {
		n++
	}
	if v.size+n > limit {
		return false
	}
	v.lines, v.size = append(v.lines, l), v.size+n
	return true
}

// fill adds a line of each of ids while the value stays within limit.
func (v *value) fill(ids []string, seq uint64, n, limit int) {
	for _, id := range ids {
		if !v.add(shortLine(id, seq, n), limit) {
			return
		}
	}
}

func nodeName(n int) string { return fmt.Sprintf("node-%04d", n) }

// shardOfValues is the index shard of values (node name: lines) at
// resourceVersion rv: its namespace's reference first, then one to each
// node of values that owns it (owns nil: every one) in node order.
func shardOfValues(values map[string][]entry.Line, owns func(node string) bool, rv uint64) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: indexNS, Name: indexShard, ResourceVersion: fmt.Sprint(rv),
			Labels:          map[string]string{placement.IndexLabel: strings.TrimPrefix(indexShard, placement.ShardPrefix)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: indexNS, UID: indexNamespace.UID}}},
		Data: map[string]string{},
	}
	for _, n := range slices.Sorted(mapsKeys(values)) {
		cm.Data[n] = entry.FormatValue(values[n])
		if owns == nil || owns(n) {
			cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n, UID: uuid(n)})
		}
	}
	return cm
}

// boundPods is the Node authorizer's answer for a node: it may get the
// pods bound to it, and no other.
type boundPods map[string]bool

func (b boundPods) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() == "pods" && a.GetVerb() == "get" && b[a.GetName()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func nodeUser(name string) user.Info {
	return &user.DefaultInfo{Name: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
}

var garbageCollector = &user.DefaultInfo{Name: "system:serviceaccount:kube-system:generic-garbage-collector",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}

// update is u's update of a shard from old to obj.
func update(u user.Info, old, obj *corev1.ConfigMap, authz authorizer.UnconditionalAuthorizer) request {
	return request{op: admission.Update, kind: corev1.SchemeGroupVersion.WithKind("ConfigMap"), resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		user: u, old: old, obj: obj, namespace: indexNamespace, authz: authz}
}

// claimShape is a node's write of claims into a full shard: nodes values,
// the writer's (the first) at 16384 characters before and after (as many
// of its entries released as it claims identities), each other node's as
// long as the shard's 1 MiB leaves it (at most 16384), listing first as
// many of the claimed identities as it holds, each by at most listers
// nodes (with an earlier seq, or for a stale claim a later one than the
// writer's: the policy reads each such line), then other identities.
type claimShape struct {
	nodes   int
	claims  int
	stale   int    // claims another node made since the writer's view (the first claimed identities)
	unbound string // a claimed pod not bound to the writer
}

// claimWrite builds the write of s: the shard before and after, the writer,
// the pods bound to it, and the identities it claims.
func claimWrite(s claimShape) (old, obj *corev1.ConfigMap, writer string, bound boundPods, claimed []string) {
	writer = nodeName(0)
	all := shortIdentities(indexShard)
	claimed, released, rest := all[:s.claims], all[s.claims:2*s.claims], all[2*s.claims:]
	bound = boundPods{}
	for _, id := range claimed {
		bound[id] = id != s.unbound
	}
	key := len(nodeName(0))
	perNode := min(entry.MaxValueLen, (maxShardData-entry.MaxValueLen-key)/(s.nodes-1)-key)
	// The writer: its held entries, the released ones before, the claims
	// after (seq indexRV - 10: above every other node's, at most the
	// shard's resourceVersion; a stale one below another node's).
	var claims, releases value
	for i, id := range claimed {
		claims.add(shortLine(id, indexRV-10, i), entry.MaxValueLen)
		releases.add(shortLine(released[i], 1, 100+i), entry.MaxValueLen)
	}
	var held value
	held.fill(rest, 1, 200, entry.MaxValueLen-max(claims.size, releases.size)-1)
	before := map[string][]entry.Line{writer: append(slices.Clone(held.lines), releases.lines...)}
	after := map[string][]entry.Line{writer: append(slices.Clone(held.lines), claims.lines...)}
	listed := map[string]int{}
	for n := 1; n < s.nodes; n++ {
		var v value
		for i := range claimed {
			j := (i + n) % len(claimed)
			id, seq := claimed[j], uint64(1+n%50)
			if j < s.stale {
				seq = indexRV - 5
			}
			if listed[id] < listers && v.add(shortLine(id, seq, n*16+i), perNode) {
				listed[id]++
			}
		}
		v.fill(rest, 1+uint64(n%50), n*16, perNode)
		before[nodeName(n)], after[nodeName(n)] = v.lines, v.lines
	}
	return shardOfValues(before, nil, indexRV), shardOfValues(after, nil, indexRV), writer, bound, claimed
}

// valuesOver returns nodes values sharing the shard's 1 MiB, each filled
// with identities from the n-th on.
func valuesOver(nodes int) map[string][]entry.Line {
	all := shortIdentities(indexShard)
	perNode := min(entry.MaxValueLen, maxShardData/nodes-len(nodeName(0)))
	values := map[string][]entry.Line{}
	for n := range nodes {
		var v value
		v.fill(all[n%len(all):], 1, n, perNode)
		values[nodeName(n)] = v.lines
	}
	return values
}

// deadKeysWrite is a node's write removing, from a shard of 1 MiB over
// nodes keys, the keys of every node that owns it no more (each odd one):
// the index policy lets a node do that.
func deadKeysWrite(nodes int) (old, obj *corev1.ConfigMap, writer string) {
	owns := func(node string) bool {
		var n int
		fmt.Sscanf(node, "node-%d", &n)
		return n%2 == 0
	}
	old = shardOfValues(valuesOver(nodes), owns, indexRV)
	obj = old.DeepCopy()
	for k := range obj.Data {
		if !owns(k) {
			delete(obj.Data, k)
		}
	}
	return old, obj, nodeName(0)
}

// collectWrite is the garbage collector's patch of a shard of 1 MiB over
// nodes nodes removing the references of the nodes for which gone is true
// (it removes every dangling reference of an object in one patch).
func collectWrite(nodes int, gone func(n int) bool) (old, obj *corev1.ConfigMap, removed []string) {
	old = shardOfValues(valuesOver(nodes), nil, indexRV)
	obj = old.DeepCopy()
	obj.OwnerReferences = slices.DeleteFunc(obj.OwnerReferences, func(r metav1.OwnerReference) bool {
		var n int
		if _, err := fmt.Sscanf(r.Name, "node-%d", &n); err != nil || r.Kind != "Node" || !gone(n) {
			return false
		}
		removed = append(removed, r.Name)
		return true
	})
	return old, obj, removed
}

// indexWrite is a write of a shard and what deploy/placement must make of
// it: the mutating policies that act on it (and what they must do), then
// the index policy's verdict.
type indexWrite struct {
	r                 request
	fields, collected bool                           // the mutating policy that acts
	mutated           func(*corev1.ConfigMap) string // what is wrong with the object the mutating policies made ("": nothing)
	refused           string                         // the index policy's refusal starts so ("": it admits the write)
}

// The index policy and its two mutating policies judge the most expensive
// writes a shard lets happen within the API server's CEL limits, and judge
// them right: a node's 12 claims (the most a write may make) in a shard of
// 1 MiB (a ConfigMap's limit) as 64 values or over 5,000 nodes (the largest
// cluster), its own value at 16,384 characters (the index policy's limit)
// of the shortest lines there are, the claimed identities listed by up to
// 500 other nodes each; the same write with half its claims stale, or one
// for a pod not bound to the node (the refusal checkpointd reads must be
// the policy's, naming what it must, not an evaluation error); one claim
// (a node's usual write, another path); a node removing 2,500 dead nodes'
// keys; a node's write with managedFields to a shard without its
// namespace's reference (stickyip-placement-fields); the garbage collector
// removing one reference of 5,000, and 2,500 at once
// (stickyip-placement-collected). Each policy's cost is printed (FIGURE
// index cost).
func TestIndexWithinCELCostLimits(t *testing.T) {
	t.Parallel()
	ps := load(t)
	// Compiled for each write (the validator's spenders record its
	// evaluations; the writes are judged in parallel).
	compile := func(t *testing.T) (index *validatingPlugin, fields, collected *compiled) {
		index = compileValidatingPlugin(t, ps.validating["stickyip-placement-index"])
		fields = compileMutating(t, ps.mutating["stickyip-placement-fields"])
		collected = compileMutating(t, ps.mutating["stickyip-placement-collected"])
		for _, c := range []*compiled{fields, collected} {
			for _, err := range c.errs {
				t.Fatal(err)
			}
		}
		return index, fields, collected
	}
	claim := func(s claimShape) func() indexWrite {
		return func() indexWrite {
			old, obj, writer, bound, claimed := claimWrite(s)
			w := indexWrite{r: update(nodeUser(writer), old, obj, bound)}
			switch {
			case s.stale > 0: // those claims named, and only they (in the order of the writer's lines)
				w.refused = "stale claim: node " + writer + ": another node claimed " + strings.Join(slices.Sorted(slices.Values(claimed[:s.stale])), " ") + " since"
			case s.unbound != "":
				w.refused = "claim refused: node " + writer + " may claim " + indexNS + "/" + s.unbound + " only for a pod bound to it; pod " + s.unbound + " is not"
			}
			return w
		}
	}
	lastClaimed := slices.Max(shortIdentities(indexShard)[:placement.MaxClaims])
	collect := func(nodes int, gone func(int) bool) func() indexWrite {
		return func() indexWrite {
			old, obj, removed := collectWrite(nodes, gone)
			return indexWrite{r: update(garbageCollector, old, obj, nil), collected: true, mutated: func(cm *corev1.ConfigMap) string {
				var recorded []string
				for _, n := range removed {
					if _, ok := cm.Data[n]; ok {
						return "node " + n + "'s key is still there"
					}
					recorded = append(recorded, n+" "+string(uuid(n)))
				}
				if want := strings.Join(recorded[max(0, len(recorded)-32):], "\n"); cm.Annotations["stickyip.io/collected"] != want {
					return fmt.Sprintf("stickyip.io/collected is %q, want the last 32 removed, %q", clip(cm.Annotations["stickyip.io/collected"]), clip(want))
				}
				return ""
			}}
		}
	}
	for _, c := range []struct {
		name  string
		write func() indexWrite
	}{
		{"12 claims, 1 MiB in 64 values", claim(claimShape{nodes: 64, claims: 12})},
		{"12 claims, 1 MiB over 5,000 nodes", claim(claimShape{nodes: maxNodes, claims: 12})},
		{"12 claims, 6 of them stale, 1 MiB over 5,000 nodes", claim(claimShape{nodes: maxNodes, claims: 12, stale: 6})},
		{"12 claims, one for a pod not bound to the node, 1 MiB in 64 values", claim(claimShape{nodes: 64, claims: 12, unbound: lastClaimed})},
		{"1 claim, 1 MiB in 64 values", claim(claimShape{nodes: 64, claims: 1})},
		{"a node removes 2,500 dead nodes' keys of 1 MiB over 5,000", func() indexWrite {
			old, obj, writer := deadKeysWrite(maxNodes)
			return indexWrite{r: update(nodeUser(writer), old, obj, boundPods{})}
		}},
		{"a claim with managedFields, 1 MiB over 5,000 nodes, no reference to the namespace", func() indexWrite {
			old, obj, writer, bound, _ := claimWrite(claimShape{nodes: maxNodes, claims: 1})
			old.OwnerReferences, obj.OwnerReferences = old.OwnerReferences[1:], obj.OwnerReferences[1:]
			obj.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: placement.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:` + writer + `":{}}}`)}}}
			return indexWrite{r: update(nodeUser(writer), old, obj, bound), fields: true, mutated: func(cm *corev1.ConfigMap) string {
				if len(cm.ManagedFields) > 0 || cm.OwnerReferences[len(cm.OwnerReferences)-1] != (metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: indexNS, UID: indexNamespace.UID}) {
					return fmt.Sprintf("managedFields %v, last reference %v", cm.ManagedFields, cm.OwnerReferences[len(cm.OwnerReferences)-1])
				}
				return ""
			}}
		}},
		{"the garbage collector removes the last of 5,000 references", collect(maxNodes, func(n int) bool { return n == maxNodes-1 })},
		{"the garbage collector removes 2,500 of 5,000 references", collect(maxNodes, func(n int) bool { return n%2 == 1 })},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			index, fields, collected := compile(t)
			w := c.write()
			old, obj := w.r.old.(*corev1.ConfigMap), w.r.obj.(*corev1.ConfigMap)
			if n := max(dataSize(old), dataSize(obj)); n > maxShardData {
				t.Fatalf("the fixture holds %d bytes, more than a ConfigMap may", n)
			}
			shape := fmt.Sprintf("%s (%d bytes, %d references)", c.name, dataSize(old), len(old.OwnerReferences))
			// The mutating policies (one acts on a node's writes, the
			// other on the collector's: never both), then the index
			// policy on what they made.
			for _, m := range []struct {
				name   string
				policy *compiled
				acts   bool
			}{{"stickyip-placement-fields", fields, w.fields}, {"stickyip-placement-collected", collected, w.collected}} {
				o := mutate(t, m.policy, w.r, false)
				mutationCosts(t, m.policy, w.r, &o)
				if o.matchErr != nil || o.mutationErr != nil {
					t.Errorf("%s: the API server fails its invocation (it then does nothing): match %v, mutation %v", m.name, trimmed(fmt.Sprint(o.matchErr)), trimmed(fmt.Sprint(o.mutationErr)))
					continue
				}
				if o.matched != m.acts {
					t.Errorf("%s: matched %v, want %v", m.name, o.matched, m.acts)
				}
				within(t, m.name, o.matchCost, 0, o.mutationCost, o.each)
				if o.matched {
					t.Logf("FIGURE index cost: %s: %s: %v", shape, m.name, o)
					w.r.obj = o.obj
				}
			}
			if w.mutated != nil {
				if bad := w.mutated(w.r.obj.(*corev1.ConfigMap)); bad != "" {
					t.Errorf("after the mutating policies: %s", bad)
				}
			}
			res, s := index.judge(t, w.r)
			msgs, evalErr := denials(res)
			if evalErr {
				t.Errorf("stickyip-placement-index: the API server fails the write (failurePolicy Fail: refused) without judging it: %q", msgs)
			}
			switch {
			case w.refused == "" && len(msgs) > 0:
				t.Errorf("stickyip-placement-index refuses the write: %q", msgs)
			case w.refused != "" && (len(msgs) == 0 || !strings.HasPrefix(msgs[0], w.refused)):
				t.Errorf("stickyip-placement-index: the API server answers %q, want a refusal starting %q", msgs, w.refused)
			}
			within(t, "stickyip-placement-index", s.match, s.messages, s.call, s.each)
			t.Logf("FIGURE index cost: %s: stickyip-placement-index: %v", shape, s)
		})
	}
}

// within fails the test unless an invocation's costs are within the API
// server's limits: the match conditions', the call's (validations or
// mutations, with their variables, and the message expressions), and each
// expression's and variable's.
func within(t *testing.T, policy string, match, messages, call int64, each map[string]int64) {
	t.Helper()
	if match > celconfig.RuntimeCELCostBudgetMatchConditions {
		t.Errorf("%s: its match conditions cost %d, over the API server's budget of %d", policy, match, celconfig.RuntimeCELCostBudgetMatchConditions)
	}
	if call+messages > celconfig.RuntimeCELCostBudget {
		t.Errorf("%s: its invocation costs %d, over the API server's budget of %d", policy, call+messages, celconfig.RuntimeCELCostBudget)
	}
	for _, name := range slices.Sorted(mapsKeys(each)) {
		if each[name] > celconfig.PerCallLimit {
			t.Errorf("%s: %s costs %d, over the API server's limit of %d for one expression", policy, name, each[name], celconfig.PerCallLimit)
		}
	}
}
