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

// Another node may give its own reference this node's UID (the garbage
// collector, refused by the index policy, cannot remove it without this
// node's): this node's writes go on, its reference and entries stay, the
// other's reference is left as it is.
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
