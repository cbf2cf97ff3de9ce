package placement

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/reservation"
)

// The shard of an identity is part of the index layout every node and both
// policies share: it must never change between releases.
func TestShardOfIsStable(t *testing.T) {
	golden := map[string]string{"": "stickyip-index-0", "a": "stickyip-index-5", "db-0": "stickyip-index-2",
		"db-1": "stickyip-index-3", "identity:cache": "stickyip-index-5", "identity:c": "stickyip-index-3", "web-7d9f8-x2x4q": "stickyip-index-7"}
	for id, want := range golden {
		if got := ShardOf(id); got != want {
			t.Errorf("ShardOf(%q) = %s, want %s (the index layout changed: every node and deploy/placement must agree on it)", id, got, want)
		}
	}
	// A StatefulSet's pods spread over every shard: its first eight over
	// the eight shards, 160 of them 19 to 21 a shard.
	seen := map[string]int{}
	for i := range 8 {
		seen[ShardOf(fmt.Sprintf("db-%d", i))]++
	}
	if len(seen) != 8 {
		t.Errorf("db-0 … db-7 fall into %d shards, want 8", len(seen))
	}
	seen = map[string]int{}
	for i := range 160 {
		seen[ShardOf(fmt.Sprintf("db-%d", i))]++
	}
	for i := range ShardCount {
		if n := seen[ShardName(i)]; n < 15 || n > 25 {
			t.Errorf("%s holds %d of 160 StatefulSet pods, want about 20", ShardName(i), n)
		}
	}
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// rec is a store entry of identity ns/name (pod pod) in network cbr0.
func rec(ip string, st reservation.State, ns, name, pod string, dur time.Duration, alloc, expires time.Time) reservation.Entry {
	return reservation.Entry{Network: "cbr0", Record: &reservation.Record{
		IP: netip.MustParseAddr(ip), State: st, ContainerID: "sb-" + pod, IfName: "eth0",
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, PodName: pod,
		Duration: dur, AllocatedAt: alloc, ExpiresAt: expires,
	}}
}

func TestDesired(t *testing.T) {
	now := t0.Add(time.Hour)
	v6 := rec("fd00::5", reservation.Allocated, "db", "db-0", "db-0", time.Hour, t0, time.Time{})
	v6.Network = "cbr1"
	legacyCopy := rec("10.244.1.12", reservation.Reserved, "db", "db-9", "db-9-node1", time.Hour, t0, now.Add(time.Minute))
	legacyCopy.Identity.Legacy = true
	legacyKey := rec("10.244.1.13", reservation.Reserved, "db", "queue", "queue-5d8f7-abcde", time.Hour, t0, now.Add(time.Minute))
	legacyKey.Identity.Legacy = true
	entries := []reservation.Entry{
		rec("10.244.1.5", reservation.Allocated, "db", "db-0", "db-0", time.Hour, t0, time.Time{}),
		v6,
		rec("10.244.1.6", reservation.Reserved, "db", "identity:cache", "cache-7d9f8-a", time.Hour, t0, now.Add(time.Minute)),
		rec("10.244.1.7", reservation.Reserved, "db", "old", "old", time.Hour, t0, now.Add(-time.Second)), // expired
		rec("10.244.1.8", reservation.Allocated, "db", "plain", "plain", 0, t0, time.Time{}),              // no duration
		rec("10.244.1.9", reservation.Cooling, "", "", "", 0, t0, now.Add(time.Minute)),
		rec("10.244.1.10", reservation.Reserved, "db", "legacy", "", time.Hour, t0, now.Add(time.Minute)),         // before PodName
		rec("10.244.1.11", reservation.Reserved, "db", "db-8", "db-8-node1", time.Hour, t0, now.Add(time.Minute)), // a restored copy's, recorded before Who.Pod
		legacyCopy,
		legacyKey,
		rec("10.244.9.3", reservation.Reserved, "db", "moved", "moved", time.Hour, t0, now.Add(time.Minute)), // old subnet
	}
	entries[5].Identity = reservation.Identity{}
	inRange := func(e reservation.Entry) bool {
		return netip.MustParsePrefix("10.244.1.0/24").Contains(e.IP) || netip.MustParsePrefix("fd00::/64").Contains(e.IP)
	}
	got := Desired("node1", entries, now, inRange)
	until := now.Add(time.Minute)
	want := map[Key]Line{
		{"db", "db-0"}:           {Identity: "db-0", Pod: "db-0", IPs: []string{"10.244.1.5", "fd00::5"}, Since: t0},
		{"db", "identity:cache"}: {Identity: "identity:cache", Pod: "cache-7d9f8-a", IPs: []string{"10.244.1.6"}, Since: t0, Until: until},
		{"db", "legacy"}:         {Identity: "legacy", Pod: "legacy", IPs: []string{"10.244.1.10"}, Since: t0, Until: until},
		{"db", "db-8"}:           {Identity: "db-8", Pod: "db-8", IPs: []string{"10.244.1.11"}, Since: t0, Until: until},
		{"db", "db-9"}:           {Identity: "db-9", Pod: "db-9", IPs: []string{"10.244.1.12"}, Since: t0, Until: until},
		{"db", "identity:queue"}: {Identity: "identity:queue", Pod: "queue-5d8f7-abcde", IPs: []string{"10.244.1.13"}, Since: t0, Until: until},
	}
	if len(got) != len(want) {
		t.Fatalf("Desired: %d entries %+v, want %d", len(got), got, len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !g.Equal(w) {
			t.Errorf("Desired[%v] = %+v, want %+v", k, g, w)
		}
	}
	if all := Desired("node1", entries, now, nil); len(all) != 7 {
		t.Errorf("without a range filter: %d entries, want 7 (the old subnet's reservation too)", len(all))
	}
}

// A node's write touches its own key and its own ownerReferences only (its
// references to a former Node of its name removed by UID), keeps the index
// label (the index policy refuses a node's write of a shard without it),
// and never carries a resourceVersion: many nodes write a shard at once,
// and no other node's write may make it fail.
func TestWriteBodies(t *testing.T) {
	name := ShardOf("db-0")
	value := "db-0 db-0 7 2026-11-23T12:00:00.000Z - 10.244.1.5"
	type body struct {
		Metadata struct {
			ResourceVersion string
			Labels          map[string]string
			OwnerReferences []map[string]any
		}
		Data map[string]*string
	}
	decode := func(v any) body {
		t.Helper()
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var b body
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	ap := decode(setPatch(name, "node1", Change{Value: value, UID: "uid-1"}))
	if ap.Metadata.ResourceVersion != "" || ap.Metadata.Labels[IndexLabel] != name[len(ShardPrefix):] || len(ap.Metadata.Labels) != 1 ||
		len(ap.Data) != 1 || *ap.Data["node1"] != value || len(ap.Metadata.OwnerReferences) != 1 ||
		ap.Metadata.OwnerReferences[0]["name"] != "node1" || ap.Metadata.OwnerReferences[0]["uid"] != "uid-1" {
		t.Errorf("set: %+v", ap)
	}
	rel := decode(releasePatch("node1", []types.UID{"uid-1"}))
	if rel.Metadata.ResourceVersion != "" || len(rel.Data) != 1 || rel.Data["node1"] != nil ||
		len(rel.Metadata.OwnerReferences) != 1 || rel.Metadata.OwnerReferences[0]["$patch"] != "delete" || rel.Metadata.OwnerReferences[0]["uid"] != "uid-1" {
		t.Errorf("release: %+v", rel)
	}
	re := decode(setPatch(name, "node1", Change{Value: value, UID: "uid-1", Stale: []types.UID{"uid-0"}}))
	if re.Metadata.ResourceVersion != "" || len(re.Metadata.OwnerReferences) != 2 || re.Metadata.OwnerReferences[0]["uid"] != "uid-1" ||
		re.Metadata.OwnerReferences[1]["$patch"] != "delete" || re.Metadata.OwnerReferences[1]["uid"] != "uid-0" || len(re.Metadata.OwnerReferences[1]) != 2 {
		t.Errorf("set, a former Node's reference removed: %+v", re)
	}
}

// Issue 51: a reservation its StatefulSet keeps is published past its own
// duration, with entry.Retained as its end (the entry keeps counting, and
// a rebuilt store takes it back as held); once the hold ends (the
// StatefulSet deleted with whenDeleted Retain) its real end is published,
// and it goes with it.
func TestDesiredHeld(t *testing.T) {
	now := t0.Add(48 * time.Hour)
	held := rec("10.244.1.5", reservation.Reserved, "db", "db-2", "db-2", 10*time.Minute, t0, t0.Add(10*time.Minute)) // its own end long past
	held.StatefulSet = &reservation.StatefulSetRef{Name: "db", UID: "u", WhenScaled: "Retain", WhenDeleted: "Delete"}
	got := Desired("node1", []reservation.Entry{held}, now, nil)
	l, ok := got[Key{"db", "db-2"}]
	if !ok || !l.Held() || l.Running() {
		t.Fatalf("Desired of a held reservation past its own end: %+v, %v; want an entry until entry.Retained", l, ok)
	}
	if s := l.String(); !strings.Contains(s, " 9999-12-31T23:59:59.999Z ") {
		t.Fatalf("entry %q: want its end written 9999-12-31T23:59:59.999Z", s)
	}
	if back, err := entry.Parse(l.String()); err != nil || !back.Held() {
		t.Fatalf("entry %q reads back as %+v, %v", l.String(), back, err)
	}
	held.StatefulSet.EndedAt = now.Add(-time.Minute)
	held.ExpiresAt = now.Add(9 * time.Minute)
	if l := Desired("node1", []reservation.Entry{held}, now, nil)[Key{"db", "db-2"}]; l.Held() || !l.Until.Equal(held.ExpiresAt) {
		t.Fatalf("hold ended: entry %+v, want until %v", l, held.ExpiresAt)
	}
	held.ExpiresAt = now
	if got := Desired("node1", []reservation.Entry{held}, now, nil); len(got) != 0 {
		t.Fatalf("hold ended and its duration over: %+v, want no entry", got)
	}
}
