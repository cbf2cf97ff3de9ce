package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"k8s.io/apimachinery/pkg/types"
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
			s.Refs = append(s.Refs, ownRef(o, types.UID("uid-"+o)))
		}
		return s
	}
	empty := &Shard{Values: map[string]string{}}
	type step struct {
		claims []string
		kind   string
		value  string // the node's value after the write: a claim's seq is the shard's resourceVersion (100; 0 for no shard)
	}
	none := time.Time{}
	many := func(n int) (want []Line, claimed []Line, ids []string) {
		for i := range n {
			id := fmt.Sprintf("p%02d", i)
			want = append(want, line(id, id, 0, t2, none))
			if i < MaxClaims {
				claimed, ids = append(claimed, line(id, id, 100, t2, none)), append(ids, id)
			}
		}
		return want, claimed, ids
	}
	manyWant, manyClaimed, manyIDs := many(MaxClaims + 3)
	cases := []struct {
		name       string
		want       []Line
		shard      *Shard
		skip       string
		step       *step
		superseded []string
	}{
		{name: "nothing held, no shard", shard: empty},
		{name: "ADD: a new identity is claimed, seq 0 on a shard not seen", want: []Line{line("db-0", "db-0", 0, t1, none)}, shard: empty,
			step: &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 0, t1, none))}},
		{name: "in sync", want: []Line{line("db-0", "db-0", 0, t1, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none))})},
		{name: "DEL: the reservation's end, the claim kept", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none))}),
			step:  &step{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}},
		{name: "the same pod again (a StatefulSet pod re-created here): a claim on the shard's resourceVersion", want: []Line{line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end))}),
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t2, none))}},
		{name: "expiry: released, the key and the owner reference go with the last entry",
			shard: shard([]string{"node2", "node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end)), "node2": value(line("web-1", "web-1", 9, t1, none))}),
			step:  &step{kind: WriteRelease}},
		{name: "an owner reference without entries is released",
			shard: shard([]string{"node1"}, map[string]string{}), step: &step{kind: WriteRelease}},
		{name: "entries without the owner reference are written again", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard(nil, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end))}),
			step:  &step{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}},
		{name: "an own entry that cannot be read is dropped", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, end)) + "\ngarbage"}),
			step:  &step{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))}},
		{name: "re-created with another pod name: a claim", want: []Line{line("identity:cache", "cache-b", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("identity:cache", "cache-a", 7, t1, end))}),
			step:  &step{claims: []string{"identity:cache"}, kind: WriteClaim, value: value(line("identity:cache", "cache-b", 100, t2, none))}},
		{name: "another node claimed it later, ours a reservation: superseded, left as it is", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard:      shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none)), "node2": value(line("db-0", "db-0", 9, t2, none))}),
			step:       &step{kind: WriteUpdate, value: value(line("db-0", "db-0", 7, t1, end))},
			superseded: []string{"db-0"}},
		{name: "another node claimed it later while the pod runs here: claimed again", want: []Line{line("db-0", "db-0", 0, t1, none)},
			shard: shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none)), "node2": value(line("db-0", "db-0", 9, t2, none))}),
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t1, none))}},
		{name: "a keyed identity claimed later by a pod of an earlier ADD while ours runs: claimed again", want: []Line{line("identity:c", "c-b", 0, t2, none)},
			shard: shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("identity:c", "c-b", 7, t2, none)), "node2": value(line("identity:c", "c-a", 9, t1, none))}),
			step:  &step{claims: []string{"identity:c"}, kind: WriteClaim, value: value(line("identity:c", "c-b", 100, t2, none))}},
		{name: "a keyed identity claimed later by a pod of a later ADD: superseded (the newer pod wins, no back and forth)",
			want:       []Line{line("identity:c", "c-a", 0, t1, none)},
			shard:      shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("identity:c", "c-a", 7, t1, none)), "node2": value(line("identity:c", "c-b", 9, t2, none))}),
			superseded: []string{"identity:c"}},
		{name: "a refused claim is not claimed again while superseded", want: []Line{line("db-0", "db-0", 0, t1, none)}, skip: "db-0",
			shard:      shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none)), "node2": value(line("db-0", "db-0", 9, t2, none))}),
			superseded: []string{"db-0"}},
		{name: "a later seq beyond the resourceVersion (never checked) does not count", want: []Line{line("db-0", "db-0", 0, t1, none)},
			shard: shard([]string{"node1", "node2"}, map[string]string{"node1": value(line("db-0", "db-0", 7, t1, none)), "node2": value(line("db-0", "db-0", 101, t2, none))})},
		{name: "the pod runs here again after the other node's claim: claimed", want: []Line{line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t1, end))}),
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t2, none))}},
		{name: "a reservation of a later ADD than the other node's, not yet published: claimed", want: []Line{line("db-0", "db-0", 0, t2, end)},
			shard: shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t1, end))}),
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t2, end))}},
		{name: "a reservation of an earlier ADD: superseded, not published", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard:      shard([]string{"node2"}, map[string]string{"node2": value(line("db-0", "db-0", 9, t2, none))}),
			superseded: []string{"db-0"}},
		{name: "a node that owns the shard no more does not count", want: []Line{line("db-0", "db-0", 0, t1, end)},
			shard: shard(nil, map[string]string{"node2": value(line("db-0", "db-0", 9, t2, none))}),
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t1, end))}},
		{name: "several claims in one write, with the other changes",
			want:  []Line{line("a", "a", 0, t2, none), line("b", "b", 0, t2, none), line("c", "c", 0, t1, end)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("c", "c", 3, t1, none), line("gone", "gone", 4, t1, end))}),
			step: &step{claims: []string{"a", "b"}, kind: WriteClaim,
				value: value(line("a", "a", 100, t2, none), line("b", "b", 100, t2, none), line("c", "c", 3, t1, end))}},
		{name: "at most MaxClaims claims a write", want: manyWant, shard: shard(nil, map[string]string{}),
			step: &step{claims: manyIDs, kind: WriteClaim, value: value(manyClaimed...)}},
		{name: "a refused claim is not tried again; the old entry stays",
			want:  []Line{line("identity:cache", "cache-b", 0, t2, none), line("db-0", "db-0", 0, t2, none)},
			shard: shard([]string{"node1"}, map[string]string{"node1": value(line("identity:cache", "cache-a", 3, t1, end))}),
			skip:  "identity:cache",
			step:  &step{claims: []string{"db-0"}, kind: WriteClaim, value: value(line("db-0", "db-0", 100, t2, none), line("identity:cache", "cache-a", 3, t1, end))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := map[string]Line{}
			for _, l := range c.want {
				want[l.Identity] = l
			}
			skip := func(id string, _ Line) bool { return id == c.skip }
			st, superseded := Plan("node1", want, c.shard, skip)
			if !slices.Equal(superseded, c.superseded) {
				t.Errorf("superseded %v, want %v", superseded, c.superseded)
			}
			if (st == nil) != (c.step == nil) {
				t.Fatalf("step %+v, want %+v", st, c.step)
			}
			if st == nil {
				return
			}
			w := c.step
			if got := entry.FormatValue(st.Lines); !slices.Equal(st.Claims, w.claims) || st.Kind != w.kind || got != w.value {
				t.Errorf("claims %q kind %s value\n%s\nwant %q %s\n%s", st.Claims, st.Kind, got, w.claims, w.kind, w.value)
			}
		})
	}
}
