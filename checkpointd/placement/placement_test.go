package placement

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/reservation"
)

// The shard of an identity is part of the index layout every node and both
// policies share: it must never change between releases.
func TestShardOfIsStable(t *testing.T) {
	golden := map[string]string{"": "stickyip-index-0", "a": "stickyip-index-d", "db-0": "stickyip-index-2",
		"db-1": "stickyip-index-3", "identity:cache": "stickyip-index-d", "web-7d9f8-x2x4q": "stickyip-index-f"}
	for id, want := range golden {
		if got := ShardOf(id); got != want {
			t.Errorf("ShardOf(%q) = %s, want %s (the index layout changed: every node and deploy/placement must agree on it)", id, got, want)
		}
	}
	// A StatefulSet's pods spread over every shard: its first sixteen over
	// fifteen shards, 160 of them none more than twice the mean.
	seen := map[string]int{}
	for i := range 16 {
		seen[ShardOf(fmt.Sprintf("db-%d", i))]++
	}
	if len(seen) != 15 {
		t.Errorf("db-0 … db-15 fall into %d shards, want 15", len(seen))
	}
	seen = map[string]int{}
	for i := range 160 {
		seen[ShardOf(fmt.Sprintf("db-%d", i))]++
	}
	for i := range ShardCount {
		if n := seen[ShardName(i)]; n < 1 || n > 20 {
			t.Errorf("%s holds %d of 160 StatefulSet pods, want 1 to 20 (mean 10)", ShardName(i), n)
		}
	}
}

func TestFieldManager(t *testing.T) {
	if got := FieldManager("node1"); got != "stickyip/node1" {
		t.Errorf("FieldManager(node1) = %q", got)
	}
	long := strings.Repeat("n", 200)
	a, b := FieldManager(long), FieldManager(long+"x")
	if len(a) > 128 || a == b || !strings.HasPrefix(a, "stickyip/") {
		t.Errorf("FieldManager of long names: %q, %q: want ≤ 128 characters, distinct", a, b)
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

// A node's write touches its own key and its own ownerReferences only, and
// keeps the index label (the index policy refuses a node's write of a shard
// without it), on the resourceVersion it read.
func TestShardPatch(t *testing.T) {
	name := ShardOf("db-0")
	for _, value := range []string{"db-0 db-0 7 2026-11-23T12:00:00.000Z - 10.244.1.5", ""} {
		raw, err := shardPatch(name, "42", "node1", "uid-1", []types.UID{"uid-0"}, value)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Metadata struct {
				ResourceVersion string
				Labels          map[string]string
				OwnerReferences []map[string]any
			}
			Data map[string]*string
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		if p.Metadata.ResourceVersion != "42" || p.Metadata.Labels[IndexLabel] != name[len(ShardPrefix):] || len(p.Metadata.Labels) != 1 {
			t.Errorf("value %q: metadata %+v", value, p.Metadata)
		}
		if len(p.Data) != 1 || (value == "") != (p.Data["node1"] == nil) || value != "" && *p.Data["node1"] != value {
			t.Errorf("value %q: data %v, want node1's key only", value, p.Data)
		}
		var del, add []any
		for _, r := range p.Metadata.OwnerReferences {
			if r["$patch"] == "delete" {
				del = append(del, r["uid"])
			} else if r["name"] == "node1" && r["kind"] == "Node" && r["apiVersion"] == "v1" {
				add = append(add, r["uid"])
			} else {
				t.Errorf("value %q: a reference to another object %v", value, r)
			}
		}
		if value != "" && (len(add) != 1 || add[0] != "uid-1" || len(del) != 1 || del[0] != "uid-0") ||
			value == "" && (len(add) != 0 || len(del) != 2) {
			t.Errorf("value %q: ownerReferences added %v, deleted %v", value, add, del)
		}
	}
}
