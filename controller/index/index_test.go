package index

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestWinner(t *testing.T) {
	c := func(node string, created, since int) Candidate {
		return Candidate{Node: node, Created: t0.Add(time.Duration(created) * time.Second), Since: t0.Add(time.Duration(since) * time.Second)}
	}
	tests := []struct {
		name  string
		cands []Candidate
		want  string
	}{
		{"none", nil, ""},
		{"one", []Candidate{c("n1", 0, 0)}, "n1"},
		{"latest pod creation", []Candidate{c("n1", 5, 9), c("n2", 7, 1), c("n3", 6, 9)}, "n2"},
		{"same pod: later entry", []Candidate{c("n1", 5, 3), c("n2", 5, 2)}, "n1"},
		{"same pod, same entry time: lower node name", []Candidate{c("n2", 5, 3), c("n1", 5, 3), c("n3", 5, 3)}, "n1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Winner(tt.cands)
			if ok != (tt.want != "") || got.Node != tt.want {
				t.Fatalf("winner %q (%v), want %q", got.Node, ok, tt.want)
			}
		})
	}
}

// ids returns identities id-<from>…id-<to-1> on node.
func ids(from, to int, node string) map[string]string {
	m := map[string]string{}
	for i := from; i < to; i++ {
		m[fmt.Sprintf("id-%03d", i)] = node
	}
	return m
}

func union(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

func TestPack(t *testing.T) {
	pair := PairBytes("id-000", "n1") // 14
	tests := []struct {
		name  string
		have  []Shard
		want  map[string]string
		limit int
		out   map[int]map[string]string
	}{
		{name: "empty", want: map[string]string{}, limit: 100, out: map[int]map[string]string{}},
		{name: "new identities fill shard 0 then 1", want: ids(0, 5, "n1"), limit: 3 * pair,
			out: map[int]map[string]string{0: ids(0, 3, "n1"), 1: ids(3, 5, "n1")}},
		{name: "an identity stays in its shard, though a lower one has room",
			have: []Shard{{0, ids(0, 1, "n1")}, {1, ids(1, 2, "n1")}}, want: union(ids(0, 2, "n2")), limit: 3 * pair,
			out: map[int]map[string]string{0: ids(0, 1, "n2"), 1: ids(1, 2, "n2")}},
		{name: "a new identity goes to the lowest shard with room",
			have: []Shard{{0, ids(0, 3, "n1")}, {1, ids(3, 4, "n1")}}, want: ids(0, 6, "n1"), limit: 3 * pair,
			out: map[int]map[string]string{0: ids(0, 3, "n1"), 1: ids(3, 6, "n1")}},
		{name: "room freed in a lower shard is used",
			have: []Shard{{0, ids(0, 3, "n1")}, {1, ids(3, 6, "n1")}}, want: union(ids(1, 7, "n1")), limit: 3 * pair,
			out: map[int]map[string]string{0: union(ids(1, 3, "n1"), ids(6, 7, "n1")), 1: ids(3, 6, "n1")}},
		{name: "an emptied shard gets nothing",
			have: []Shard{{0, ids(0, 3, "n1")}, {1, ids(3, 6, "n1")}}, want: ids(0, 3, "n1"), limit: 3 * pair,
			out: map[int]map[string]string{0: ids(0, 3, "n1")}},
		{name: "an identity in two shards stays in the lower",
			have: []Shard{{1, ids(0, 2, "n1")}, {0, ids(1, 2, "n3")}}, want: ids(0, 2, "n2"), limit: 10 * pair,
			out: map[int]map[string]string{0: ids(1, 2, "n2"), 1: ids(0, 1, "n2")}},
		{name: "a pair larger than the limit gets a shard of its own", want: ids(0, 2, "n1"), limit: 1,
			out: map[int]map[string]string{0: ids(0, 1, "n1"), 1: ids(1, 2, "n1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Pack(tt.have, tt.want, tt.limit); !reflect.DeepEqual(got, tt.out) {
				t.Fatalf("packed\n%v\nwant\n%v", got, tt.out)
			}
		})
	}
}

// Packing is stable: packing its own result again changes nothing, and
// every shard stays under the limit.
func TestPackStable(t *testing.T) {
	want := map[string]string{}
	for i := range 2000 {
		want[fmt.Sprintf("identity:%s-%d", strings.Repeat("k", i%250), i)] = fmt.Sprintf("node-%d", i%50)
	}
	const limit = 64 << 10
	out := Pack(nil, want, limit)
	var have []Shard
	for n, m := range out {
		size := 0
		for id, node := range m {
			size += PairBytes(id, node)
		}
		if size > limit {
			t.Errorf("shard %d holds %d bytes, over %d", n, size, limit)
		}
		have = append(have, Shard{n, m})
	}
	if len(out) < 3 {
		t.Fatalf("%d shards: the test wants several", len(out))
	}
	if w := Plan(have, want, limit); len(w) != 0 {
		t.Fatalf("planning the packed index again gives %d writes: %+v", len(w), w[0])
	}
}

func TestDiff(t *testing.T) {
	s := func(v string) *string { return &v }
	have := []Shard{{0, map[string]string{"a": "n1", "b": "n1", "c": "n2"}}, {1, map[string]string{"d": "n1"}}, {2, map[string]string{"e": "n1"}}}
	want := map[int]map[string]string{0: {"a": "n1", "b": "n3", "x": "n4"}, 2: {"e": "n1"}, 3: {"f": "n5"}}
	got := Diff(have, want)
	exp := []Write{
		{Number: 0, Op: Patch, Changes: map[string]*string{"b": s("n3"), "c": nil, "x": s("n4")}},
		{Number: 1, Op: Delete},
		{Number: 3, Op: Create, Nodes: map[string]string{"f": "n5"}},
	}
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("writes %+v, want %+v", got, exp)
	}
	b, err := got[0].MergePatch()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if n := m["data"]; len(m) != 1 || len(n) != 3 || n["b"] != "n3" || n["x"] != "n4" || n["c"] != nil {
		t.Fatalf("merge patch %s", b)
	}
	if _, ok := m["data"]["c"]; !ok {
		t.Fatalf("merge patch %s does not remove c (null)", b)
	}
}

// PairBytes counts what a pair adds to the shard's JSON: a shard packed to
// exactly its JSON's size is one shard, and one byte less splits it (a
// shard counted short would be over ShardBytes on the API server, one
// counted long would split an index that fits).
func TestPairBytesIsTheJSON(t *testing.T) {
	want := map[string]string{"identity:web-0": "n1", "db-12": "node-with-a-long-name", "x": "n22"}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	exact := len(b) - 1 // {…}: a comma after each pair, the braces one byte more
	if got := Pack(nil, want, exact); len(got) != 1 {
		t.Fatalf("packed under the JSON's own size, %d bytes: %d shards, want 1", exact, len(got))
	}
	if got := Pack(nil, want, exact-1); len(got) != 2 {
		t.Fatalf("packed under one byte less than the JSON's size: %d shards, want 2", len(got))
	}
}
