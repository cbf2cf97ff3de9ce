// Package index builds a namespace's placement index from the claims the
// controller accepted: which node holds each identity (Winner), which
// shard of its series each key lives in (Pack), and the writes that bring
// the shards from what they hold to that (Diff). A series is packed alone
// (placementv1.ShardKey: pod-named and keyed identities apart); its keys
// are what the shards' data holds.
//
// Winner: of the accepted claims of an identity (from records of Nodes
// that exist under the record's UID), the one whose pod was created last
// — the pod that runs, or last ran — ties broken by the later entry
// (since), then by the lower node name, so that every pass picks the same.
//
// Packing: an identity stays in the shard it is in while it stays in the
// index (the hint's binding may read the shards at any moment; an identity
// that moved would be missing from both, or in both, in between); a new
// one goes into the lowest-numbered shard it fits in, under
// placementv1.ShardBytes of keys and values; a shard left empty is deleted.
// Writes are JSON merge patches of only the keys that changed (null
// removes one), so a pass writes each changed shard once, whatever the
// number of claims that changed it.
package index

import (
	"maps"
	"slices"
	"time"
)

// Candidate is one node's accepted claim on an identity.
type Candidate struct {
	Node string
	// Created is the accepted pod's creation time; Since the entry's.
	Created, Since time.Time
}

// Later reports whether a wins over b: its pod was created later; on a
// tie, its entry is later; on a tie, its node name is lower.
func Later(a, b Candidate) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	if !a.Since.Equal(b.Since) {
		return a.Since.After(b.Since)
	}
	return a.Node < b.Node
}

// Winner returns the winning candidate of cands (one per node); false when
// there is none.
func Winner(cands []Candidate) (Candidate, bool) {
	var best Candidate
	found := false
	for _, c := range cands {
		if !found || Later(c, best) {
			best, found = c, true
		}
	}
	return best, found
}

// PairBytes is what one identity and its node take of a shard: the JSON
// of the pair, quotes, colon and comma. Identities and node names hold no
// character JSON escapes (their schemas allow none).
func PairBytes(identity, node string) int { return len(identity) + len(node) + 6 }

// Shard is one shard of a namespace's series as it stands.
type Shard struct {
	Number int
	Nodes  map[string]string
}

// Pack returns the contents each shard should have (by number) for the
// index want (identity to node): what is in a shard stays there, a new
// identity goes into the lowest-numbered shard with room under limit
// bytes (PairBytes), an identity found in two shards stays in the lower.
// A shard of have that gets nothing is absent from the result.
func Pack(have []Shard, want map[string]string, limit int) map[int]map[string]string {
	have = slices.Clone(have)
	slices.SortFunc(have, func(a, b Shard) int { return a.Number - b.Number })
	out := map[int]map[string]string{}
	size := map[int]int{}
	put := func(n int, id string) {
		if out[n] == nil {
			out[n] = map[string]string{}
		}
		out[n][id] = want[id]
		size[n] += PairBytes(id, want[id])
	}
	placed := make(map[string]bool, len(want))
	for _, s := range have {
		for _, id := range slices.Sorted(maps.Keys(s.Nodes)) {
			if _, ok := want[id]; ok && !placed[id] {
				placed[id] = true
				put(s.Number, id)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if placed[id] {
			continue
		}
		n := 0
		for size[n] > 0 && size[n]+PairBytes(id, want[id]) > limit {
			n++
		}
		put(n, id)
	}
	return out
}
