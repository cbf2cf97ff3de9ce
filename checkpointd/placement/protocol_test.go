package placement

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A line another node keeps for a pod that runs here (stale, or written
// before the index policy existed) stops winning once this node reads the
// shard again: it claims the identity again, later (issue 38: lines never
// lapsed).
func TestPublisherClaimsRunningPodBack(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	r.api.bound["db/db-0"] = "node2" // node2 claims it while it is bound there for a moment
	claimAs(t, r.api, "node2", "db", Line{Identity: "db-0", Pod: "db-0", Since: t0.Add(time.Second), IPs: []string{"10.244.2.7"}})
	r.api.bound["db/db-0"] = "node1"
	if got := r.api.hint("db", "db-0"); got != "node2" {
		t.Fatalf("setup: hint %s", got)
	}
	r.now = t0.Add(6 * time.Minute) // Resync: node1 reads the shard again
	r.pass()
	if got := r.api.hint("db", "db-0"); got != "node1" {
		t.Errorf("node1 runs db-0 and read the shard: the hint names %s", got)
	}
	claims := r.writes(WriteClaim)
	for range 5 {
		r.now = r.now.Add(6 * time.Minute)
		r.pass()
	}
	if r.writes(WriteClaim) != claims {
		t.Errorf("%d more claims once node1 had it back, want none", r.writes(WriteClaim)-claims)
	}
}

// Two pods with one key running at once (a rollout) on two nodes: the
// newer ADD wins, and neither claims again and again.
func TestPublisherKeyedIdentityNoBackAndForth(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/cache-a"] = "node1"
	r.api.bound["db/cache-b"] = "node2"
	r.store.set(allocated("10.244.1.5", "db", "identity:cache", "cache-a", t0))
	store2 := &fakeStore{}
	store2.set(allocated("10.244.2.5", "db", "identity:cache", "cache-b", t0.Add(time.Minute)))
	p2 := NewWithAPI(r.api.as("node2"), Options{Node: "node2", Store: store2, Now: func() time.Time { return r.now }})
	for range 10 {
		r.pass()
		p2.Pass(t.Context())
		r.now = r.now.Add(6 * time.Minute)
	}
	if got := r.api.hint("db", "identity:cache"); got != "node2" {
		t.Errorf("hint %s, want node2 (the later ADD)", got)
	}
	if r.api.writes > 3 {
		t.Errorf("%d writes for two claims: back and forth", r.api.writes)
	}
}

// A line no node could have written under the index policy (a seq beyond
// the shard's resourceVersion, written before the policy existed) never
// counts: the node claims the identity as if it were not there (issue 38:
// the install window).
func TestPublisherJunkNeverCounts(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	ref := shardRef{"db", ShardOf("db-0")}
	r.api.rv++
	r.api.shards[ref] = &fakeShard{rv: r.api.rv, values: map[string]string{
		"evil": fmt.Sprintf("db-0 db-0 %d 2026-11-25T00:00:00.000Z - 10.244.9.9", r.api.rv+1000)},
		refs: []metav1.OwnerReference{ownRef("evil", "uid-evil")}}
	if got := r.api.hint("db", "db-0"); got != "" {
		t.Fatalf("junk counted: hint %s", got)
	}
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	if r.api.hint("db", "db-0") != "node1" || r.errors("apply") != 0 || r.writes(WriteClaim) != 1 {
		t.Errorf("hint %s, %d apply errors, %d claims", r.api.hint("db", "db-0"), r.errors("apply"), r.writes(WriteClaim))
	}
}

// A shard poisoned under the former index policy (which let a node give
// its own reference another node's UID): this node's writes go on, its
// reference and entries stay, the other's reference is left to the garbage
// collector.
func TestPublisherWritesBesideItsUIDElsewhere(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	ref := shardRef{"db", ShardOf("db-0")}
	s := r.api.shards[ref]
	s.values["node3"] = "db-1 db-1 5 2026-11-25T00:00:00.000Z - 10.244.3.9"
	s.refs = append(s.refs, ownRef("node3", "uid-node1"))
	r.api.rv++
	s.rv = r.api.rv
	r.now = t0.Add(time.Minute)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, r.now.Add(time.Hour)))
	r.pass()
	v := r.api.view(ref)
	if l, ok := r.api.line("db", "db-0", "node1"); !ok || l.Until.IsZero() || !v.OwnedBy("node1") || !v.OwnedBy("node3") || r.errors("apply") != 0 {
		t.Errorf("node1's DEL: %+v %v, refs %v, apply errors %d", l, ok, v.Refs, r.errors("apply"))
	}
}

// Another node's reference carrying this node's UID, made before this
// node's first write to the shard (issue 47): the write is refused
// ("reference taken:") while it is there, and made again shortly, in the
// same pass, once the garbage collector removed it; no wait of Interval.
func TestPublisherReferenceTaken(t *testing.T) {
	r := newRig(t)
	r.p.takenWait = time.Millisecond
	r.api.bound["db/db-0"] = "node1"
	r.api.bound["db/own-3"] = "node3"
	ref := shardRef{"db", ShardOf("db-0")}
	r.api.rv++
	r.api.shards[ref] = &fakeShard{rv: r.api.rv, values: map[string]string{"node3": "db-0x db-0x 5 2026-11-25T00:00:00.000Z - 10.244.3.9"},
		refs: []metav1.OwnerReference{ownRef("node3", "uid-node1")}}
	tries := 0
	r.api.before = func(node string) {
		if node != "node1" {
			return
		}
		if tries++; tries == 5 { // the collector: the dangling reference and its node's key go
			r.api.mu.Lock()
			s := r.api.shards[ref]
			s.refs, s.values = nil, map[string]string{}
			r.api.rv++
			s.rv = r.api.rv
			r.api.mu.Unlock()
		}
	}
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	if l, ok := r.api.line("db", "db-0", "node1"); !ok || !l.Running() || r.api.owner("db", "db-0", "node1") != "uid-node1" {
		t.Fatalf("node1's claim after the collector's answer: %+v %v, owner %q", l, ok, r.api.owner("db", "db-0", "node1"))
	}
	if tries != 5 || r.errors("taken") != 4 || r.errors("apply") != 0 {
		t.Errorf("%d tries, %d taken, %d apply errors: want 5 tries, 4 refused as taken, in one pass", tries, r.errors("taken"), r.errors("apply"))
	}
	// Never removed (nothing collects it): maxTaken tries, then the usual wait.
	r2 := newRig(t)
	r2.p.takenWait = time.Millisecond
	r2.api.bound["db/db-0"] = "node1"
	r2.api.rv++
	r2.api.shards[ref] = &fakeShard{rv: r2.api.rv, values: map[string]string{"node3": "db-0x db-0x 5 2026-11-25T00:00:00.000Z - 10.244.3.9"},
		refs: []metav1.OwnerReference{ownRef("node3", "uid-node1")}}
	r2.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r2.pass()
	if b, waits := r2.p.retry[ref]; r2.api.tries != maxTaken || !waits || b.next.IsZero() {
		t.Errorf("%d tries, then a wait until %v (%v): want %d, then a wait", r2.api.tries, b.next, waits, maxTaken)
	}
}

// A fight over a keyed identity (another node claiming it again before
// each of this node's writes) costs this node that claim only: its other
// claims, updates and releases in the shard land in the same pass, and it
// tries the contested claim again a bounded number of times, with no wait
// on the shard (issue 47: a stale claim failed the whole write).
func TestPublisherStaleClaimCostsThatClaimOnly(t *testing.T) {
	r := newRig(t)
	shard := ShardOf("identity:k")
	ids := sameShard("identity:x", shard, 2)
	r.api.bound["db/k-1"] = "node1"
	r.api.bound["db/k-2"] = "node2"
	for _, id := range ids {
		r.api.bound["db/"+id[len("identity:"):]] = "node1"
	}
	claimAs(t, r.api, "node2", "db", Line{Identity: "identity:k", Pod: "k-2", Since: t0.Add(-time.Hour), IPs: []string{"10.244.2.7"}})
	r.store.set(allocated("10.244.1.9", "db", ids[0], ids[0][len("identity:"):], t0))
	r.pass()
	fights := 0
	r.api.before = func(node string) {
		if node == "node1" {
			fights++
			claimAs(t, r.api, "node2", "db", Line{Identity: "identity:k", Pod: "k-2", Since: t0.Add(-time.Hour), IPs: []string{"10.244.2.7"}})
		}
	}
	r.now = t0.Add(time.Minute)
	r.store.set(allocated("10.244.1.5", "db", "identity:k", "k-1", r.now), // contested: node1's ADD is the later one
		reservedAt("10.244.1.9", "db", ids[0], ids[0][len("identity:"):], t0, r.now.Add(time.Hour)), // an update
		allocated("10.244.1.8", "db", ids[1], ids[1][len("identity:"):], r.now))                     // another claim
	r.pass()
	if l, ok := r.api.line("db", ids[0], "node1"); !ok || l.Running() {
		t.Errorf("the update of %s: %+v %v", ids[0], l, ok)
	}
	if _, ok := r.api.line("db", ids[1], "node1"); !ok {
		t.Errorf("the claim of %s did not land", ids[1])
	}
	if _, waits := r.p.retry[shardRef{"db", shard}]; r.api.hint("db", "identity:k") != "node2" || fights > 1+2*maxRereads || waits || r.errors("apply") != 0 {
		t.Errorf("identity:k named %s after %d writes tried, a wait %v, %d apply errors: want node2's (it claims last), at most %d tries, no wait",
			r.api.hint("db", "identity:k"), fights, waits, r.errors("apply"), 1+2*maxRereads)
	}
	// The fight ends: the next pass claims it.
	r.api.before = nil
	r.now = r.now.Add(5 * time.Second)
	r.pass()
	if r.api.hint("db", "identity:k") != "node1" {
		t.Errorf("after the fight: identity:k named %s, want node1", r.api.hint("db", "identity:k"))
	}
}
