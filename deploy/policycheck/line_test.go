package policycheck

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// grammar evaluates one index line three ways: the index policy's check of
// a node's own line (its "malformed" variable), the placement hint's reading
// of a shard holding it (its "listed" variable: is it counted), and
// checkpointd's parser. The policies and checkpointd must agree on every
// line (issue 38: ".." and ".-" in names, a non-canonical IPv6 address
// counted by the hint, invisible to the publishers).
type grammar struct {
	malformed, listed cel.Program
}

func newGrammar(t testing.TB) *grammar {
	ps := load(t)
	index, hint := ps.validating["stickyip-placement-index"], ps.mutating["stickyip-placement"]
	return &grammar{
		malformed: program(t, variable(t, index.Spec.Variables, "malformed")),
		listed:    program(t, variable(t, hint.Spec.Variables, "listed")),
	}
}

// verdicts returns whether the index policy, the hint and the parser take
// line.
func (g *grammar) verdicts(t testing.TB, line string) (index, hint, parser bool) {
	f := strings.Split(line, " ")
	index = size(eval(t, g.malformed, map[string]any{"variables": map[string]any{"mine": [][]string{f}}})) == 0
	shard := map[string]any{
		"metadata": map[string]any{"resourceVersion": "999999999999999999",
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": "node1"}}},
		"data": map[string]any{"node1": line},
	}
	hint = size(eval(t, g.listed, map[string]any{"params": shard, "variables": map[string]any{"identity": f[0]}})) == 1
	_, err := entry.Parse(line)
	return index, hint, err == nil
}

// size is the length of a CEL list value.
func size(v any) int { return reflect.ValueOf(v).Len() }

// agree fails the test unless the three verdicts on line agree. The parser
// also wants a pod-name identity's line to name that pod (the index policy
// checks it in another validation, the hint too): lines that do not are
// compared on the index policy's form only.
func (g *grammar) agree(t testing.TB, line string) bool {
	t.Helper()
	if strings.ContainsAny(line, "\n") || line == "" {
		return false
	}
	index, hint, parser := g.verdicts(t, line)
	f := strings.Split(line, " ")
	samePod := len(f) > 1 && (strings.HasPrefix(f[0], "identity:") || f[0] == f[1])
	if samePod && (index != parser || hint != parser) || !samePod && (hint || parser) {
		t.Errorf("line %q: index policy %v, placement hint %v, checkpointd %v", line, index, hint, parser)
	}
	return parser
}

const good = "db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.244.1.5"

// corpus holds lines each field of which is at an edge of its form.
var corpus = []string{
	good,
	"identity:cache cache-7d9f8-x2x4q 0 2026-11-27T10:00:00.000Z 2026-11-27T11:00:00.123Z 10.244.1.5,fd00::1",
	"db..0 db..0 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db.-0 db.-0 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-.0 db-.0 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"-db -db 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db- db- 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"DB-0 DB-0 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"identity: x 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"identity:a.b a 42 2026-11-27T10:00:00.000Z - 10.244.1.5",
	strings.Repeat("a", 63) + " " + strings.Repeat("a", 63) + " 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	strings.Repeat("a", 64) + " " + strings.Repeat("a", 64) + " 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	strings.Repeat("a.", 126) + "a " + strings.Repeat("a.", 126) + "a 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	strings.Repeat("a.", 127) + "a " + strings.Repeat("a.", 127) + "a 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	"identity:" + strings.Repeat("a.", 126) + "a x 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	"identity:" + strings.Repeat("a.", 127) + "a x 1 2026-11-27T10:00:00.000Z - 10.0.0.1",
	"db-0 db-0 999999999999999999 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 1000000000000000000 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 9223372036854775807 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 99999999999999999999999 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 042 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 -1 2026-11-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 42 2026-11-27T10:00:00Z - 10.244.1.5",
	"db-0 db-0 42 2026-13-27T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 42 2026-02-30T10:00:00.000Z - 10.244.1.5",
	"db-0 db-0 42 2026-11-27T24:00:00.000Z - 10.244.1.5",
	"db-0 db-0 42 2026-11-27T10:60:00.000Z - 10.244.1.5",
	"db-0 db-0 42 2026-11-27T10:00:00.000+01:00 - 10.244.1.5",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z later 10.244.1.5",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.244.1.500",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - ::ffff:10.0.0.1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 2001:DB8::1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 2001:db8:0:0:0:0:0:1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 2001:db8::1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - fe80::1%eth0",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 010.0.0.1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4,10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8,10.0.0.9",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.0.0.1,",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z -  10.0.0.1",
	"db-0 db-0 42 2026-11-27T10:00:00.000Z - 10.0.0.1 extra",
	"db-0 other 42 2026-11-27T10:00:00.000Z - 10.0.0.1",
	"db-0",
	// Issue 51: a reservation its StatefulSet keeps ends at entry.Retained,
	// a time of the form: taken by both policies, unchanged.
	"db-2 db-2 42 2026-11-27T10:00:00.000Z 9999-12-31T23:59:59.999Z 10.244.1.5",
}

func TestLineGrammarAgrees(t *testing.T) {
	g := newGrammar(t)
	taken := 0
	for _, l := range corpus {
		if g.agree(t, l) {
			taken++
		}
	}
	if taken < 6 || taken > len(corpus)/2 {
		t.Errorf("%d of %d corpus lines taken: the corpus no longer tests both sides", taken, len(corpus))
	}
}

// A line written by checkpointd is taken by both policies.
func TestWrittenLinesTaken(t *testing.T) {
	g := newGrammar(t)
	for _, id := range identities(500) {
		pod := id
		if strings.HasPrefix(id, "identity:") {
			pod = "pod-x"
		}
		l, err := entry.Parse(strings.Replace(good, "db-0 db-0", id+" "+pod, 1))
		if err != nil {
			t.Fatal(err)
		}
		if index, hint, _ := g.verdicts(t, l.String()); !index || !hint {
			t.Fatalf("%q as written: index policy %v, placement hint %v", l.String(), index, hint)
		}
	}
	if placement.ShardCount != 8 {
		t.Fatal("the policies' shard count")
	}
}

// FuzzLineGrammar: on any line the fuzzer makes up, the index policy, the
// placement hint and checkpointd's parser agree (make test-fuzz runs it).
func FuzzLineGrammar(f *testing.F) {
	for _, l := range corpus {
		f.Add(l)
	}
	g := newGrammar(f)
	f.Fuzz(func(t *testing.T, line string) {
		g.agree(t, line)
	})
}
