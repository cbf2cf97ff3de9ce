package placement

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// The shard of an identity is part of the index layout every node shares:
// it must never change between releases.
func TestShardOfIsStable(t *testing.T) {
	// SHA-256("") starts e3…, SHA-256("a") ca…
	golden := map[string]string{"": "stickyip-placement-e", "a": "stickyip-placement-c", "db-0": "stickyip-placement-5",
		"cache": "stickyip-placement-5", "web-7d9f8-x2x4q": "stickyip-placement-d"}
	for id, want := range golden {
		if got := ShardOf(id); got != want {
			t.Errorf("ShardOf(%q) = %s, want %s (the index layout changed: every node must agree on it)", id, got, want)
		}
	}
	seen := map[string]int{}
	for i := 0; i < 1600; i++ {
		seen[ShardOf("db-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('0'+i%10)))]++
	}
	if len(seen) != ShardCount {
		t.Errorf("1600 identities fell into %d shards, want all %d", len(seen), ShardCount)
	}
	for i := 0; i < ShardCount; i++ {
		if _, ok := seen[ShardName(i)]; !ok {
			t.Errorf("no identity in %s", ShardName(i))
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
	entries := []reservation.Entry{
		rec("10.244.1.5", reservation.Allocated, "db", "db-0", "db-0", time.Hour, t0, time.Time{}),
		v6,
		rec("10.244.1.6", reservation.Reserved, "db", "cache", "cache-7d9f8-a", time.Hour, t0, now.Add(time.Minute)),
		rec("10.244.1.7", reservation.Reserved, "db", "old", "old", time.Hour, t0, now.Add(-time.Second)), // expired
		rec("10.244.1.8", reservation.Allocated, "db", "plain", "plain", 0, t0, time.Time{}),              // no duration
		rec("10.244.1.9", reservation.Cooling, "", "", "", 0, t0, now.Add(time.Minute)),
		rec("10.244.1.10", reservation.Reserved, "db", "legacy", "", time.Hour, t0, now.Add(time.Minute)),    // before PodName
		rec("10.244.9.3", reservation.Reserved, "db", "moved", "moved", time.Hour, t0, now.Add(time.Minute)), // old subnet
	}
	entries[5].Identity = reservation.Identity{}
	inRange := func(e reservation.Entry) bool {
		return netip.MustParsePrefix("10.244.1.0/24").Contains(e.IP) || netip.MustParsePrefix("fd00::/64").Contains(e.IP)
	}
	got := Desired("node1", entries, now, inRange)
	want := map[Key]Want{
		{"db", "db-0"}:   {Hold{Node: "node1", Pod: "db-0", IPs: []string{"10.244.1.5", "fd00::5"}, Since: t0}, true},
		{"db", "cache"}:  {Hold{Node: "node1", Pod: "cache-7d9f8-a", IPs: []string{"10.244.1.6"}, Since: t0}, false},
		{"db", "legacy"}: {Hold{Node: "node1", Pod: "legacy", IPs: []string{"10.244.1.10"}, Since: t0}, false},
	}
	if len(got) != len(want) {
		t.Fatalf("Desired: %d entries %+v, want %d", len(got), got, len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !g.Equal(w.Hold) || g.Running != w.Running {
			t.Errorf("Desired[%v] = %+v, want %+v", k, g, w)
		}
	}
	if all := Desired("node1", entries, now, nil); len(all) != 4 {
		t.Errorf("without a range filter: %d entries, want 4 (the old subnet's reservation too)", len(all))
	}
}

// Every write carries the index label, a release too: the index policy
// refuses a node's write of a shard without it (a release once removed the
// label with the node's last entry, and was refused forever).
func TestApplyConfigKeepsTheLabel(t *testing.T) {
	name := ShardOf("db-0")
	for _, mine := range []map[string]Hold{nil, {"db-0": {Node: "node1", Pod: "db-0", IPs: []string{"10.244.1.5"}, Since: t0}}} {
		cm := applyConfig("db", name, "node1", "uid-1", mine)
		if got := cm.Labels[IndexLabel]; got != name[len(ShardPrefix):] {
			t.Errorf("%d entries: label %s=%q, want %q", len(mine), IndexLabel, got, name[len(ShardPrefix):])
		}
		if (len(cm.OwnerReferences) == 1) != (len(mine) > 0) || len(cm.Data) != len(mine) {
			t.Errorf("%d entries: owner references %v, data %v", len(mine), cm.OwnerReferences, cm.Data)
		}
	}
}
