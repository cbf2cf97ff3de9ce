package index

import (
	"encoding/json"
	"maps"
	"slices"
)

// Op is what a write does to a shard.
type Op string

// Ops of a Write.
const (
	Create Op = "create"
	Patch  Op = "patch"
	Delete Op = "delete"
)

// Write is one write to a namespace's shard.
type Write struct {
	Number int
	Op     Op
	// Nodes is the content of a shard to create.
	Nodes map[string]string
	// Changes are the keys a patch sets (nil: removes).
	Changes map[string]*string
}

// Diff returns the writes that take the shards from have to want (Pack's
// result), in shard order: a shard want has and have has not is created,
// one have has and want has not is deleted, one both have is patched with
// the keys that differ, if any.
func Diff(have []Shard, want map[int]map[string]string) []Write {
	cur := make(map[int]map[string]string, len(have))
	for _, s := range have {
		cur[s.Number] = s.Nodes
	}
	numbers := slices.Sorted(maps.Keys(want))
	for n := range cur {
		if _, ok := want[n]; !ok {
			numbers = append(numbers, n)
		}
	}
	slices.Sort(numbers)
	var out []Write
	for _, n := range numbers {
		h, exists := cur[n]
		w := want[n]
		switch {
		case !exists:
			out = append(out, Write{Number: n, Op: Create, Nodes: w})
		case len(w) == 0:
			out = append(out, Write{Number: n, Op: Delete})
		default:
			if ch := changes(h, w); len(ch) > 0 {
				out = append(out, Write{Number: n, Op: Patch, Changes: ch})
			}
		}
	}
	return out
}

// changes returns the keys to set (or remove: nil) to make have want.
func changes(have, want map[string]string) map[string]*string {
	out := map[string]*string{}
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			out[k] = &v
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

// MergePatch is the JSON merge patch of a Patch write: the shard's data
// keys that change (null removes one).
func (w Write) MergePatch() ([]byte, error) {
	return json.Marshal(map[string]any{"data": w.Changes})
}

// Plan returns the writes that make the shards have hold the index want,
// packed under limit bytes a shard.
func Plan(have []Shard, want map[string]string, limit int) []Write {
	return Diff(have, Pack(have, want, limit))
}
