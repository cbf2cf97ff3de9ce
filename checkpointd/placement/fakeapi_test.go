package placement

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// fakeAPI is the API server as the publisher sees it, with the index
// policy's rules in Go (deploy/placement/index-policy.yaml is the
// authority; test/e2e runs it for real): no resourceVersion preconditions;
// each node changes only its own key and reference, whose UID no other
// reference carries (before or after the write); at
// most MaxClaims claims a write, each with a seq above every other node's
// for its identity and at most the resourceVersion, for a pod bound to the
// writer, never a mirror pod's name.
type fakeAPI struct {
	mu     sync.Mutex
	shards map[shardRef]*fakeShard
	rv     uint64
	bound  map[string]string    // namespace/pod → node
	uids   map[string]types.UID // node → its Node's UID (default uid-<node>)
	down   bool
	// before, when set, runs before each write tried, outside the lock:
	// another node's or the garbage collector's write in between.
	before func(node string)
	gets   int
	writes int // writes made
	tries  int // writes tried

	listed     map[string]string // each node's Node's ShardsAnnotation
	nodeGets   int               // reads of it
	nodeWrites int               // writes of it
}

type fakeShard struct {
	rv     uint64
	values map[string]string // by node
	refs   []metav1.OwnerReference
}

var (
	errDown = errors.New("connection refused")
	gr      = schema.GroupResource{Resource: "configmaps"}
)

func newFakeAPI() *fakeAPI {
	return &fakeAPI{shards: map[shardRef]*fakeShard{}, bound: map[string]string{}, rv: 100}
}

// as returns the fake as node's API.
func (f *fakeAPI) as(node string) API { return &fakeNodeAPI{f, node} }

type fakeNodeAPI struct {
	f    *fakeAPI
	node string
}

func (f *fakeAPI) uid(node string) types.UID {
	if uid, ok := f.uids[node]; ok {
		return uid
	}
	return types.UID("uid-" + node)
}

func (a *fakeNodeAPI) NodeUID(context.Context) (types.UID, error) {
	if a.f.down {
		return "", errDown
	}
	return a.f.uid(a.node), nil
}

func (a *fakeNodeAPI) Get(_ context.Context, ns, name string) (*Shard, error) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	f.gets++
	return f.view(shardRef{ns, name}), nil
}

func (f *fakeAPI) view(ref shardRef) *Shard {
	s := f.shards[ref]
	if s == nil {
		return &Shard{Values: map[string]string{}}
	}
	return &Shard{Exists: true, RV: fmt.Sprint(s.rv), Values: maps.Clone(s.values), Refs: slices.Clone(s.refs)}
}

func (a *fakeNodeAPI) Write(_ context.Context, ns, name string, c Change) (*Shard, error) {
	f := a.f
	if f.before != nil {
		f.before(a.node)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	f.tries++
	ref := shardRef{ns, name}
	old := f.shards[ref]
	next := &fakeShard{values: map[string]string{}}
	if old != nil {
		next.values, next.refs = maps.Clone(old.values), slices.Clone(old.refs)
	}
	// A strategic merge patch: references removed by UID (every one with
	// it), the node's own merged into the first with its UID.
	drop := c.Stale
	if c.Value == "" {
		if old == nil {
			return &Shard{Values: map[string]string{}}, nil
		}
		drop = append(drop, c.UID)
	}
	next.refs = slices.DeleteFunc(next.refs, func(r metav1.OwnerReference) bool { return slices.Contains(drop, r.UID) })
	if c.Value == "" {
		delete(next.values, a.node)
	} else {
		next.values[a.node] = c.Value
		if i := slices.IndexFunc(next.refs, func(r metav1.OwnerReference) bool { return r.UID == c.UID }); i >= 0 {
			next.refs[i] = ownRef(a.node, c.UID)
		} else {
			next.refs = append(next.refs, ownRef(a.node, c.UID))
		}
	}
	if err := f.admit(a.node, ns, name, old, next); err != nil {
		return nil, err
	}
	f.rv++
	next.rv = f.rv
	f.shards[ref] = next
	f.writes++
	return f.view(ref), nil
}

// admit is the index policy on node's write of shard ns/name from old (nil:
// a create) to next.
func (f *fakeAPI) admit(node, ns, name string, old, next *fakeShard) error {
	bad := func(format string, a ...any) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: fmt.Sprintf(format, a...)}}
	}
	forbid := func(format string, a ...any) error { return apierrors.NewForbidden(gr, name, fmt.Errorf(format, a...)) }
	var rv uint64
	before := map[string]string{}
	var oldRefs []metav1.OwnerReference
	if old != nil {
		rv, before, oldRefs = old.rv, old.values, old.refs
	}
	for k, v := range next.values {
		if k != node && before[k] != v {
			return forbid("node %s may change only its own entries", node)
		}
	}
	var own []metav1.OwnerReference
	for _, r := range next.refs {
		if r.Kind == "Node" && r.Name == node {
			own = append(own, r)
		}
	}
	notMine := func(r metav1.OwnerReference) bool { return !(r.Kind == "Node" && r.Name == node) }
	others := func(refs []metav1.OwnerReference) []metav1.OwnerReference {
		return slices.DeleteFunc(slices.Clone(refs), func(r metav1.OwnerReference) bool { return !notMine(r) })
	}
	for _, o := range own {
		if slices.Contains(oldRefs, o) {
			continue
		}
		if slices.ContainsFunc(append(slices.Clone(next.refs), oldRefs...), func(r metav1.OwnerReference) bool { return r.UID == o.UID && notMine(r) }) {
			return forbid("reference taken: node %s: the UID of its reference (%s) is another reference's", node, o.UID)
		}
	}
	if !slices.Equal(others(next.refs), others(oldRefs)) {
		return forbid("node %s may add or remove only its own ownerReference", node)
	}
	for k := range before {
		if _, kept := next.values[k]; kept || k == node {
			continue
		}
		if slices.ContainsFunc(oldRefs, func(r metav1.OwnerReference) bool { return r.Kind == "Node" && r.Name == k }) {
			return forbid("node %s may remove only the keys of nodes that own the shard no more", node)
		}
	}
	_, hasKey := next.values[node]
	if hasKey != (len(own) == 1) || len(own) > 1 {
		return forbid("node %s owns the shard exactly while it has entries there", node)
	}
	if !hasKey {
		return nil
	}
	lines, errs := entry.ParseValue(next.values[node])
	if len(errs) > 0 || len(next.values[node]) > entry.MaxValueLen {
		return bad("node %s: malformed entries %v", node, errs)
	}
	held, _ := entry.ParseValue(before[node])
	var claims []Line
	for _, l := range lines {
		if ShardOf(l.Identity) != name {
			return bad("node %s: each identity in its own shard", node)
		}
		if l.Seq > rv {
			return bad("stale claim: node %s: no seq may exceed the resourceVersion of the shard (%d)", node, rv)
		}
		if !slices.ContainsFunc(held, func(o Line) bool { return o.SameClaim(l) && o.Seq == l.Seq }) {
			claims = append(claims, l)
		}
	}
	if len(claims) > MaxClaims {
		return forbid("node %s claims %d identities in one write; at most %d", node, len(claims), MaxClaims)
	}
	var stale []string
	for _, c := range claims {
		for k, v := range before {
			if k == node {
				continue
			}
			for _, l := range strings.Split(v, "\n") {
				if f := strings.Split(l, " "); strings.HasPrefix(l, c.Identity+" ") && len(f) >= 3 && entry.IsSeq(f[2]) && parseSeq(f[2]) <= rv && parseSeq(f[2]) >= c.Seq &&
					!slices.Contains(stale, c.Identity) {
					stale = append(stale, c.Identity)
				}
			}
		}
	}
	if len(stale) > 0 {
		return bad("stale claim: node %s: another node claimed %s since (the seq of a claim is above ...): read the shard again", node, strings.Join(stale, " "))
	}
	for _, c := range claims {
		if strings.HasSuffix(c.Pod, "-"+node) {
			return forbid("claim refused: node %s may not claim an identity for a pod named like its mirror pods (<name>-%s)", node, node)
		}
	}
	for _, c := range claims {
		if f.bound[ns+"/"+c.Pod] != node {
			return forbid("claim refused: node %s may claim %s/%s only for a pod bound to it; pod %s is not", node, ns, c.Identity, c.Pod)
		}
	}
	return nil
}

// nodes returns every node the fake knows of.
func (f *fakeAPI) nodes() map[string]bool {
	out := map[string]bool{}
	for n := range f.uids {
		out[n] = true
	}
	for _, n := range f.bound {
		out[n] = true
	}
	return out
}

func parseSeq(s string) uint64 {
	var n uint64
	fmt.Sscan(s, &n)
	return n
}

// line returns node's entry for identity ns/id.
func (f *fakeAPI) line(ns, id, node string) (Line, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shards[shardRef{ns, ShardOf(id)}]
	if s == nil {
		return Line{}, false
	}
	lines, _ := entry.ParseValue(s.values[node])
	i := slices.IndexFunc(lines, func(l Line) bool { return l.Identity == id })
	if i < 0 {
		return Line{}, false
	}
	return lines[i], true
}

// hint returns the node the placement policy would name for ns/id: of the
// owners listing it, the one with the largest seq.
func (f *fakeAPI) hint(ns, id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shards[shardRef{ns, ShardOf(id)}] == nil {
		return ""
	}
	return laterNode(f.view(shardRef{ns, ShardOf(id)}), "", id)
}

// owner returns the UID of node's reference in id's shard ("": none).
func (f *fakeAPI) owner(ns, id, node string) types.UID {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shards[shardRef{ns, ShardOf(id)}]
	if s == nil {
		return ""
	}
	for _, r := range s.refs {
		if r.Kind == "Node" && r.Name == node {
			return r.UID
		}
	}
	return ""
}

func (f *fakeAPI) owned(ns, id, node string) bool { return f.owner(ns, id, node) != "" }

// Listed is the node's Node's ShardsAnnotation (the fake keeps one value
// per node; NodeRestriction lets a node write only its own Node).
func (a *fakeNodeAPI) Listed(context.Context) (string, error) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", errDown
	}
	f.nodeGets++
	return f.listed[a.node], nil
}

func (a *fakeNodeAPI) List(_ context.Context, value string) error {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errDown
	}
	if f.listed == nil {
		f.listed = map[string]string{}
	}
	f.listed[a.node] = value
	f.nodeWrites++
	return nil
}
