package placement

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// Holds' states in the cases: whether the pod runs on the node.
const (
	running  = true
	reserved = false
)

func hold(node, pod string, since time.Time, ips ...string) Hold {
	return Hold{Node: node, Pod: pod, IPs: ips, Since: since}
}

func TestPlan(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	mine := func(p string, at time.Time) Hold { return hold("node1", p, at, "10.244.1.5") }
	theirs := func(p string, at time.Time) Hold { return hold("node2", p, at, "10.244.2.7") }
	want := func(p string, run bool, at time.Time) Want { return Want{mine(p, at), run} }
	shard := func(owners []string, holds map[string]Hold) *Shard {
		return &Shard{Exists: true, Owners: owners, Holds: holds}
	}
	empty := &Shard{Holds: map[string]Hold{}}
	type step struct {
		claim string
		force bool
		kind  string
		ids   []string // the node's entries after the write
	}
	cases := []struct {
		name       string
		want       map[string]Want
		shard      *Shard
		skip       string
		steps      []step
		superseded []string
	}{
		{name: "nothing held, no shard", want: nil, shard: empty},
		{name: "ADD: a new identity is claimed", want: map[string]Want{"db-0": want("db-0", running, t1)}, shard: empty,
			steps: []step{{claim: "db-0", kind: WriteClaim, ids: []string{"db-0"}}}},
		{name: "in sync", want: map[string]Want{"db-0": want("db-0", running, t1)},
			shard: shard([]string{"node1"}, map[string]Hold{"db-0": mine("db-0", t1)})},
		{name: "DEL: nothing to write", want: map[string]Want{"db-0": want("db-0", reserved, t1)},
			shard: shard([]string{"node1"}, map[string]Hold{"db-0": mine("db-0", t1)})},
		{name: "the same pod again (a StatefulSet pod re-created here): an update", want: map[string]Want{"db-0": want("db-0", running, t2)},
			shard: shard([]string{"node1"}, map[string]Hold{"db-0": mine("db-0", t1)}),
			steps: []step{{kind: WriteUpdate, ids: []string{"db-0"}}}},
		{name: "expiry: released, the owner reference goes with the last entry", want: nil,
			shard: shard([]string{"node2", "node1"}, map[string]Hold{"db-0": mine("db-0", t1), "web-1": theirs("web-1", t1)}),
			steps: []step{{kind: WriteRelease}}},
		{name: "an owner reference without entries is released", want: nil,
			shard: shard([]string{"node1"}, map[string]Hold{}), steps: []step{{kind: WriteRelease}}},
		{name: "entries without the owner reference are applied again", want: map[string]Want{"db-0": want("db-0", reserved, t1)},
			shard: shard(nil, map[string]Hold{"db-0": mine("db-0", t1)}),
			steps: []step{{kind: WriteUpdate, ids: []string{"db-0"}}}},
		{name: "re-created with another pod name: a claim", want: map[string]Want{"cache": want("cache-b", running, t2)},
			shard: shard([]string{"node1"}, map[string]Hold{"cache": mine("cache-a", t1)}),
			steps: []step{{claim: "cache", kind: WriteClaim, ids: []string{"cache"}}}},
		{name: "another node claimed it later: superseded, left alone", want: map[string]Want{"db-0": want("db-0", reserved, t1)},
			shard:      shard([]string{"node1", "node2"}, map[string]Hold{"db-0": theirs("db-0", t2)}),
			steps:      []step{{kind: WriteRelease}},
			superseded: []string{"db-0"}},
		{name: "the pod runs here again, after the other node's claim: taken over", want: map[string]Want{"db-0": want("db-0", running, t2)},
			shard: shard([]string{"node2"}, map[string]Hold{"db-0": theirs("db-0", t1)}),
			steps: []step{{claim: "db-0", force: true, kind: WriteClaim, ids: []string{"db-0"}}}},
		{name: "an older allocation here does not take over", want: map[string]Want{"db-0": want("db-0", running, t1)},
			shard:      shard([]string{"node2"}, map[string]Hold{"db-0": theirs("db-0", t2)}),
			superseded: []string{"db-0"}},
		{name: "a reservation here never takes over", want: map[string]Want{"db-0": want("db-0", reserved, t2)},
			shard:      shard([]string{"node2"}, map[string]Hold{"db-0": theirs("db-0", t1)}),
			superseded: []string{"db-0"}},
		{name: "one claim per write, the first carries the other changes",
			want:  map[string]Want{"a": want("a", running, t2), "b": want("b", running, t2), "c": want("c", reserved, t1)},
			shard: shard([]string{"node1"}, map[string]Hold{"c": mine("c", t1), "gone": mine("gone", t1)}),
			steps: []step{{claim: "a", kind: WriteClaim, ids: []string{"a", "c"}}, {claim: "b", kind: WriteClaim, ids: []string{"a", "b", "c"}}}},
		{name: "a refused claim is not tried again; the old entry stays until then",
			want:  map[string]Want{"cache": want("cache-b", running, t2), "db-0": want("db-0", running, t2)},
			shard: shard([]string{"node1"}, map[string]Hold{"cache": mine("cache-a", t1)}),
			skip:  "cache",
			steps: []step{{claim: "db-0", kind: WriteClaim, ids: []string{"cache", "db-0"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			skip := func(id string, _ Hold) bool { return id == c.skip }
			steps, superseded := Plan("node1", c.want, c.shard, skip)
			if !slices.Equal(superseded, c.superseded) {
				t.Errorf("superseded %v, want %v", superseded, c.superseded)
			}
			if len(steps) != len(c.steps) {
				t.Fatalf("%d steps %+v, want %d %+v", len(steps), steps, len(c.steps), c.steps)
			}
			for i, s := range steps {
				w := c.steps[i]
				if s.Claim != w.claim || s.Force != w.force || s.Kind != w.kind {
					t.Errorf("step %d: claim %q force %v kind %s, want %q %v %s", i, s.Claim, s.Force, s.Kind, w.claim, w.force, w.kind)
				}
				if ids := slices.Sorted(maps.Keys(s.Mine)); !slices.Equal(ids, w.ids) {
					t.Errorf("step %d: entries %v, want %v", i, ids, w.ids)
				}
				for id, h := range s.Mine {
					if h.Node != "node1" {
						t.Errorf("step %d writes %s naming %s", i, id, h.Node)
					}
				}
			}
			// The last step leaves the node's entries as wanted, except
			// superseded and skipped ones.
			if len(steps) > 0 {
				last := steps[len(steps)-1].Mine
				for id, w := range c.want {
					if slices.Contains(c.superseded, id) || id == c.skip {
						continue
					}
					if !last[id].Equal(w.Hold) {
						t.Errorf("after the last write %s is %+v, want %+v", id, last[id], w)
					}
				}
			}
		})
	}
}
