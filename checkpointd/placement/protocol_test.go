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

// Junk a node wrote before the index policy existed (a seq beyond the
// shard's resourceVersion) never counts, and the next node write removes
// it: the policy requires it (issue 38: the install window).
func TestPublisherRemovesJunk(t *testing.T) {
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
	if _, ok := r.api.shards[ref].values["evil"]; ok || r.api.hint("db", "db-0") != "node1" {
		t.Errorf("junk kept (%v) or hint %s", r.api.shards[ref].values, r.api.hint("db", "db-0"))
	}
	if r.errors("apply") != 0 {
		t.Errorf("%d apply errors", r.errors("apply"))
	}
}

// Another node's reference carrying this node's UID (which the garbage
// collector would delete together with this node's own) is removed by this
// node's next write, with that node's key.
func TestPublisherRemovesReferenceWithItsUID(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	ref := shardRef{"db", ShardOf("db-0")}
	r.api.rv++
	r.api.shards[ref] = &fakeShard{rv: r.api.rv, values: map[string]string{"node3": "db-1 db-1 5 2026-11-25T00:00:00.000Z - 10.244.3.9"},
		refs: []metav1.OwnerReference{ownRef("node3", "uid-node1")}}
	r.p.written.set[ref] = true // read before the first write
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	s := r.api.view(ref)
	if _, ok := s.Values["node3"]; ok || len(s.Refs) != 1 || s.Refs[0].Name != "node1" || r.api.hint("db", "db-0") != "node1" {
		t.Errorf("after node1's write: values %v refs %v", s.Values, s.Refs)
	}
}
