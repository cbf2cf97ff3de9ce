package placement

import (
	"maps"
	"slices"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// Write kinds, as the writes metric counts them.
const (
	WriteClaim   = "claim"   // an identity added, or pointed at another pod or ADD (an ADD)
	WriteUpdate  = "update"  // the node's entries changed otherwise (a reservation's end at DEL, its addresses)
	WriteRelease = "release" // entries removed only (expiry, release)
)

// Step is one write to a shard: the node's whole value there after it (no
// lines: its key and ownerReference removed).
type Step struct {
	Lines []Line
	// Claim is the identity this write claims; its line gets the shard's
	// resourceVersion as Seq when written. "" for none.
	Claim string
	Kind  string // WriteClaim, WriteUpdate or WriteRelease
}

// Plan returns the writes that make node's value in shard s show want, its
// entries for that shard by identity, in order; none when it already does.
// Each write claims at most one identity (the API server checks each claim
// with the Node authorizer, one per write); the first also carries every
// other change. An entry node already has keeps its Seq while the claim
// (pod and ADD) is the same.
//
// A reservation (no sandbox runs the pod here) is claimed anew only when no
// other node lists the identity with a later ADD: the node that ran the pod
// last keeps it. Identities another node claimed later are returned as
// superseded. skip, when set, names claims not to try again (refused by the
// policy before, for the same pod and ADD).
func Plan(node string, want map[string]Line, s *Shard, skip func(id string, l Line) bool) (steps []Step, superseded []string) {
	cur, _ := s.Lines(node)
	have := map[string]Line{}
	for _, l := range cur {
		have[l.Identity] = l
	}
	base := map[string]Line{}
	var claims []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		w, c := want[id], have[id]
		_, held := have[id]
		others := s.Others(node, id)
		switch {
		case held && c.SameClaim(w):
			w.Seq = c.Seq
			base[id] = w
			if laterClaim(others, c.Seq) {
				superseded = append(superseded, id)
			}
		case !w.Running() && laterADD(others, w):
			superseded = append(superseded, id)
			if held {
				base[id] = c // ours, older: left as it is
			}
		case skip != nil && skip(id, w):
			if held {
				base[id] = c
			}
		default:
			if held {
				base[id] = c // until its claim is written
			}
			claims = append(claims, id)
		}
	}
	if len(claims) == 0 {
		value := entry.FormatValue(slices.Collect(maps.Values(base)))
		if value == s.Values[node] && s.OwnedBy(node) == (len(base) > 0) || !s.Exists && len(base) == 0 {
			return nil, superseded
		}
		kind := WriteUpdate
		if len(base) == 0 || len(base) < len(have) && subset(base, have) {
			kind = WriteRelease
		}
		return []Step{{Lines: slices.Collect(maps.Values(base)), Kind: kind}}, superseded
	}
	mine := maps.Clone(base)
	for _, id := range claims {
		mine[id] = want[id]
		steps = append(steps, Step{Lines: slices.Collect(maps.Values(mine)), Claim: id, Kind: WriteClaim})
	}
	return steps, superseded
}

// laterClaim reports whether another owner claimed the identity after the
// node's claim seq.
func laterClaim(others map[string]Line, seq uint64) bool {
	for _, o := range others {
		if o.Seq > seq {
			return true
		}
	}
	return false
}

// laterADD reports whether another owner lists the identity with a later
// ADD than w's.
func laterADD(others map[string]Line, w Line) bool {
	for _, o := range others {
		if o.Since.After(w.Since) {
			return true
		}
	}
	return false
}

// subset reports whether every entry of a is in b, the same.
func subset(a, b map[string]Line) bool {
	for id, l := range a {
		if o, ok := b[id]; !ok || !l.Equal(o) {
			return false
		}
	}
	return true
}
