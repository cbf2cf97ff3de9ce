package placement

import (
	"maps"
	"slices"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/contract"
)

// Write kinds, as the writes metric counts them.
const (
	WriteClaim   = "claim"   // an identity added, or pointed at another pod or ADD, or claimed again (an ADD)
	WriteUpdate  = "update"  // the node's entries changed otherwise (a reservation's end at DEL, its addresses)
	WriteRelease = "release" // entries removed only (expiry, release)
)

// MaxClaims bounds the claims of one write: the index policy asks the
// Node authorizer once per claim, one validation each (CEL allows two
// authorizer checks per expression), and has that many.
const MaxClaims = 12

// Step is one write to a shard: the node's whole value there after it (no
// lines: its key and ownerReference removed).
type Step struct {
	Lines []Line
	// Claims are the identities this write claims, each line's Seq set to
	// the shard's resourceVersion as last seen.
	Claims []string
	Kind   string // WriteClaim, WriteUpdate or WriteRelease
}

// Plan returns the next write that brings node's value in shard s towards
// want, its entries for that shard by identity; nil when it already shows
// them. A write claims at most MaxClaims identities, so more than that take
// several writes, each planned on the shard the last one returned. An
// entry node already has keeps its Seq while the claim (pod and ADD) is the
// same.
//
// A reservation (no sandbox runs the pod here) is claimed anew only when no
// other node lists the identity with a later ADD: the node that ran the pod
// last keeps it. A running pod's entry that another node claimed later is
// claimed again (that node's line can only be stale, or never checked):
// for a pod-name identity always (the index policy takes it only while the
// pod is bound here), for a keyed identity only when this ADD is the later
// one (two pods with one key run at once during a rollout: the newer wins,
// no back and forth). Identities another node claimed later and that are
// not claimed again are returned as superseded. skip, when set, names
// claims not to try again (refused by the policy before, for the same pod
// and ADD).
func Plan(node string, want map[string]Line, s *Shard, skip func(id string, l Line) bool) (step *Step, superseded []string) {
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
		skipped := skip != nil && skip(id, w)
		switch {
		case held && c.SameClaim(w):
			w.Seq = c.Seq
			base[id] = w
			_, later, ok := latest(others)
			switch {
			case !ok || later.Seq <= c.Seq:
			case w.Running() && !skipped && reclaims(id, w, later):
				claims = append(claims, id)
			default:
				superseded = append(superseded, id)
			}
		case !w.Running() && laterADD(others, w):
			superseded = append(superseded, id)
			if held {
				base[id] = c // ours, older: left as it is
			}
		case skipped:
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
	if len(claims) > MaxClaims {
		claims = claims[:MaxClaims]
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
		return &Step{Lines: slices.Collect(maps.Values(base)), Kind: kind}, superseded
	}
	seq := s.ClaimSeq()
	for _, id := range claims {
		l := want[id]
		l.Seq = seq
		base[id] = l
	}
	return &Step{Lines: slices.Collect(maps.Values(base)), Claims: claims, Kind: WriteClaim}, superseded
}

// reclaims reports whether the node running w claims id again over later,
// another node's later claim.
func reclaims(id string, w, later Line) bool {
	if _, keyed := contract.IdentityKey(id); !keyed {
		return true
	}
	return w.Since.After(later.Since)
}

// latest returns the latest claim of others (Shard.Others), and its node.
func latest(others map[string]Line) (node string, l Line, ok bool) {
	for n, o := range others {
		if !ok || o.Seq > l.Seq {
			node, l, ok = n, o, true
		}
	}
	return node, l, ok
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
