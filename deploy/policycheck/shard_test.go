package policycheck

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/checkpointd/placement"
)

// identities returns n identities as pods and workloads name them, with
// every character the alphabet holds at the ends: pod names of StatefulSets
// and Deployments, one-character names, dotted names, and keyed identities.
func identities(n int) []string {
	r := rand.New(rand.NewPCG(38, 42))
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyz"
	const inner = "-.0123456789abcdefghijklmnopqrstuvwxyz"
	word := func(max int) string {
		var b strings.Builder
		b.WriteByte(alnum[r.IntN(len(alnum))])
		for range r.IntN(max) {
			b.WriteByte(inner[r.IntN(len(inner))])
		}
		if s := b.String(); s[len(s)-1] == '-' || s[len(s)-1] == '.' {
			return s + string(alnum[r.IntN(len(alnum))])
		}
		return b.String()
	}
	out := []string{"a", "0", "db-0", "db-7", "identity:a", "identity:q", "web.x-1", "identity:cache.v2"}
	for len(out) < n {
		var id string
		switch r.IntN(4) {
		case 0:
			id = fmt.Sprintf("%s-%d", word(8), r.IntN(500))
		case 1:
			id = word(20)
		case 2:
			id = "identity:" + word(12)
		default:
			id = fmt.Sprintf("%s-%s-%s", word(6), word(4), word(4))
		}
		if strings.Contains(id, "..") || strings.Contains(id, ".-") || strings.Contains(id, "-.") {
			continue
		}
		out = append(out, id)
	}
	return out
}

// The hint reads one shard per pod: its match condition, evaluated by the
// API server's CEL for each of the 8 shards, picks exactly the shard
// checkpointd writes the identity to (issue 42: the cross-check ran only in
// make bench-placement).
func TestHintShardIsPublishersShard(t *testing.T) {
	hint := load(t).mutating["stickyip-placement"]
	if hint == nil || len(hint.Spec.MatchConditions) != 1 {
		t.Fatal("stickyip-placement: want one match condition")
	}
	prg := program(t, hint.Spec.MatchConditions[0].Expression)
	for _, id := range identities(3000) {
		annotations := map[string]any{"io.kubernetes.cri/reserved-ip-duration": "10"}
		meta := map[string]any{"annotations": annotations}
		if key, keyed := strings.CutPrefix(id, "identity:"); keyed {
			annotations["stickyip.io/identity"] = key
			meta["generateName"] = "cache-"
		} else {
			meta["name"] = id
		}
		var matched []string
		for i := range placement.ShardCount {
			vars := map[string]any{
				"object": map[string]any{"metadata": meta, "spec": map[string]any{}},
				"params": map[string]any{"metadata": map[string]any{"name": placement.ShardName(i)}, "data": map[string]any{}},
			}
			if eval(t, prg, vars) == true {
				matched = append(matched, placement.ShardName(i))
			}
		}
		if len(matched) != 1 || matched[0] != placement.ShardOf(id) {
			t.Fatalf("identity %q: the hint reads %v, checkpointd writes %s", id, matched, placement.ShardOf(id))
		}
	}
}

// The index policy accepts an identity in exactly the shard checkpointd
// writes it to.
func TestIndexShardIsPublishersShard(t *testing.T) {
	index := load(t).validating["stickyip-placement-index"]
	prg := program(t, validation(t, index, "each identity once, in its own shard"))
	for _, id := range identities(3000) {
		pod := id
		if strings.HasPrefix(id, "identity:") {
			pod = "cache-x"
		}
		for i := range placement.ShardCount {
			shard := placement.ShardName(i)
			vars := map[string]any{"variables": map[string]any{
				"nodeWrite": true, "node": "node1", "shard": strings.TrimPrefix(shard, placement.ShardPrefix),
				"mine": [][]string{{id, pod, "1", "2026-11-27T00:00:00.000Z", "-", "10.0.0.1"}},
			}}
			if got, want := eval(t, prg, vars), shard == placement.ShardOf(id); got != want {
				t.Fatalf("identity %q in %s: the index policy says %v, checkpointd's shard is %s", id, shard, got, placement.ShardOf(id))
			}
		}
	}
}
