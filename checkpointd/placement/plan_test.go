package placement

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

func TestPlan(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Minute)
	end := t2.Add(time.Hour)
	// line is an entry of node1's (seq 0 until claimed); until zero: running.
	line := func(id, pod string, seq uint64, since, until time.Time) Line {
		return Line{Identity: id, Pod: pod, Seq: seq, Since: since, Until: until, IPs: []string{"10.244.1.5"}}
	}
	value := func(ls ...Line) string {
		var s []string
		for _, l := range ls {
			s = append(s, l.String())
		}
		return strings.Join(s, "\n")
	}
	shard := func(owners []string, values map[string]string) *Shard {
		s := &Shard{Exists: true, RV: "100", Values: values}
		for _, o := range owners {
			s.Owners = append(s.Owners, Owner{Name: o, UID: "uid-" + "o", APIVersion: "v1"})
		}
		return s
	}
	empty := &Shard{Values: map[string]string{}}
	type step struct {
		claim string
		kind  string
		value string // the node's value after the write, seqs of claims 0
	}
	none := time.Time{}
	cases := []struct {
		name       string
		want       []Line
		shard      *Shard
		skip       string
		steps      []step
		superseded []string
	}{
		{name: "nothing held, no shard", shard: empty},
		{name: "ADD: a new identity is claimed", want: []Line{line("db-0", "db-0", 0, t1, none)}, shard: empty,
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t1, none))}}},
		{name: "in sync", want: []Line{line("db-0", "db-0", 0, t1, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none))})},
		{name: "DEL: the reservation's end, the claim kept", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none))}),
			steps: []step{{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}}},
		{name: "the same pod again (a StatefulSet pod re-created here): a claim", want: []Line{line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end))}),
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t2, none))}}},
		{name: "expiry: released, the key and the owner reference go with the last entry",
			shard: shard([]string{"node2", "node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end)), "node2": value(line("web-1", "web-1", 9, t1, none))}),
			steps: []step{{kind: WriteRelease}}},
		{name: "an owner reference without entries is released",
			shard: shard([]string{"node1"}, map[string]string{}), steps: []step{{kind: WriteRelease}}},
		{name: "entries without the owner reference are written again", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard(nil, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end))}),
			steps: []step{{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}}},
		{name: "an own entry that cannot be read is dropped", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end)) + "\ngarbage"}),
			steps: []step{{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}}},
		{name: "re-created with another pod name: a claim", want: []Line{line("identity:cache", "cache-b", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("identity:cache", "cache-a", 7, t1, end))}),
			steps: []step{{claim: "identity:cache", kind: WriteClaim, value: value(line("identity:cache", "cache-b", 0, t2, none))}}},
		{name: "another node claimed it later: superseded, ours left as it is", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard:      shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none)), "node2": value(line("db-0", "db-0", 9, t2, none))}),
			steps:      []step{{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}},
			superseded: []string{"db-0"}},
		{name: "the pod runs here again after the other node's claim: claimed", want: []Line{line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t1, end))}),
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t2, none))}}},
		{name: "a reservation of a later ADD than the other node's, not yet published: claimed", want: []Line{line("db-0", "db-0", 0, t2, end)},
			shard: shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t1, end))}),
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t2, end))}}},
		{name: "a reservation of an earlier ADD: superseded, not published", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard:      shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t2, none))}),
			superseded: []string{"db-0"}},
		{name: "a node that owns the shard no more does not count", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard(nil, map[string]string{"node2": value(line("db-0", "db-0", 9, t2, none))}),
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t1, end))}}},
		{name: "one claim per write, the first carries the other changes",
			want:  []Line{line("a", "a", 0, t2, none), line("b", "b", 0, t2, none), line("c", "c", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("c", "c", 3, t1, none), line("gone", "gone", 4, t1, end))}),
			steps: []step{
				{claim: "a", kind: WriteClaim, value: value(line("a", "a", 0, t2, none), line("c", "c", 3, t1, end))},
				{claim: "b", kind: WriteClaim, value: value(line("a", "a", 0, t2, none), line("b", "b", 0, t2, none), line("c", "c", 3, t1, end))}}},
		{name: "a refused claim is not tried again; the old entry stays",
			want:  []Line{line("identity:cache", "cache-b", 0, t2, none), line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("identity:cache", "cache-a", 3, t1, end))}),
			skip:  "identity:cache",
			steps: []step{{claim: "db-0", kind: WriteClaim, value: value(line("db-0", "db-0", 0, t2, none), line("identity:cache", "cache-a", 3, t1, end))}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := map[string]Line{}
			for _, l := range c.want {
				want[l.Identity] = l
			}
			skip := func(id string, _ Line) bool { return id == c.skip }
			steps, superseded := Plan("node1", want, c.shard, skip)
			if !slices.Equal(superseded, c.superseded) {
				t.Errorf("superseded %v, want %v", superseded, c.superseded)
			}
			if len(steps) != len(c.steps) {
				t.Fatalf("%d steps %+v, want %d %+v", len(steps), steps, len(c.steps), c.steps)
			}
			for i, s := range steps {
				w := c.steps[i]
				if got := entry.FormatValue(s.Lines); s.Claim != w.claim || s.Kind != w.kind || got != w.value {
					t.Errorf("step %d: claim %q kind %s value\n%s\nwant %q %s\n%s", i, s.Claim, s.Kind, got, w.claim, w.kind, w.value)
				}
			}
		})
	}
}
