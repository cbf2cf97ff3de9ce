package placement

import (
	"maps"
	"slices"
)

// Write kinds, as the writes metric counts them.
const (
	WriteClaim   = "claim"   // an identity added, taken over or pointed at another pod (ADD)
	WriteUpdate  = "update"  // the node's entries changed otherwise (the same pod's ADD again)
	WriteRelease = "release" // entries removed only (expiry, release)
)

// Step is one write to a shard: the node's whole set of entries there after
// it (server-side apply: an entry left out is removed).
type Step struct {
	Mine  map[string]Hold
	Claim string // the identity this write claims; "" for none
	Force bool   // the claim takes the entry over from another node
	Kind  string // WriteClaim, WriteUpdate or WriteRelease
}

// Plan returns the writes that make shard s show want, node's entries for
// that shard, in order; none when it already does. Each write claims at most
// one identity (the API server checks each claim with the Node authorizer,
// at most one per write), the first also carries every other change.
//
// An identity another node holds is taken over only by an allocation newer
// than that node's claim: the node that ran the pod last keeps it. The
// others are returned as superseded and left alone. skip, when set, names
// claims not to try again (refused before, for the same pod and ADD).
func Plan(node string, want map[string]Want, s *Shard, skip func(id string, h Hold) bool) (steps []Step, superseded []string) {
	cur := s.Own(node)
	base := map[string]Hold{}
	var claims []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		w := want[id]
		c, held := s.Holds[id]
		switch {
		case held && c.Node == node && c.Pod == w.Pod:
			base[id] = w.Hold
		case held && c.Node != node && !(w.Running && w.Since.After(c.Since)):
			superseded = append(superseded, id)
		case skip != nil && skip(id, w.Hold):
			if held && c.Node == node {
				base[id] = c // keep what is there rather than remove it
			}
		default:
			if held && c.Node == node {
				base[id] = c // until its claim is written
			}
			claims = append(claims, id)
		}
	}
	wantRef := len(base) > 0 || len(claims) > 0
	if len(claims) == 0 {
		if holdsEqual(base, cur) && s.OwnedBy(node) == wantRef {
			return nil, superseded
		}
		if !s.Exists && len(base) == 0 {
			return nil, superseded
		}
		kind := WriteUpdate
		if len(base) < len(cur) && subset(base, cur) || len(base) == 0 {
			kind = WriteRelease
		}
		return []Step{{Mine: base, Kind: kind}}, superseded
	}
	mine := maps.Clone(base)
	for _, id := range claims {
		mine[id] = want[id].Hold
		c, held := s.Holds[id]
		steps = append(steps, Step{Mine: maps.Clone(mine), Claim: id, Force: held && c.Node != node, Kind: WriteClaim})
	}
	return steps, superseded
}

func holdsEqual(a, b map[string]Hold) bool {
	return maps.EqualFunc(a, b, Hold.Equal)
}

// subset reports whether every entry of a is in b, the same.
func subset(a, b map[string]Hold) bool {
	for id, h := range a {
		if o, ok := b[id]; !ok || !h.Equal(o) {
			return false
		}
	}
	return true
}
