package placement

import (
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// Shard is a shard of the index as the API server showed it; it is not
// changed once decoded (Others indexes it on first use).
type Shard struct {
	Exists bool              // false: no such object (yet), or not known
	RV     string            // its resourceVersion
	Values map[string]string // each node's value, by node name
	// Refs are all its ownerReferences, as they are: the Nodes that own it
	// (OwnedBy).
	Refs []metav1.OwnerReference

	indexOnce sync.Once
	byID      map[string]map[string]Line // counted entries by identity, then node (Others)
}

// DecodeShard reads a shard.
func DecodeShard(cm *corev1.ConfigMap) *Shard {
	s := &Shard{Exists: true, RV: cm.ResourceVersion, Values: map[string]string{}, Refs: cm.OwnerReferences}
	for k, v := range cm.Data {
		s.Values[k] = v
	}
	return s
}

// rv is the shard's resourceVersion as a number (0 for a shard that does
// not exist): no claim written on it may carry a larger Seq.
func (s *Shard) rv() uint64 {
	n, _ := strconv.ParseUint(s.RV, 10, 63)
	return n
}

// OwnedBy reports whether node owns the shard (a v1 Node ownerReference):
// the placement policy counts only the entries of such nodes.
func (s *Shard) OwnedBy(node string) bool {
	return slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool {
		return r.Kind == "Node" && r.Name == node && r.APIVersion == "v1"
	})
}

// Lines returns node's entries in the shard, and what could not be read of
// them (skipped).
func (s *Shard) Lines(node string) ([]Line, []error) { return entry.ParseValue(s.Values[node]) }

// Others returns the entries for identity that the placement hint counts,
// of the nodes other than node: owners of the shard, with a Seq the index
// policy could have checked (at most the shard's resourceVersion). The
// values are parsed once per shard read, not once per identity asked about.
func (s *Shard) Others(node, identity string) map[string]Line {
	s.indexOnce.Do(s.index)
	out := map[string]Line{}
	for n, l := range s.byID[identity] {
		if n != node {
			out[n] = l
		}
	}
	return out
}

// index fills byID: each owner's first counted entry of each identity.
func (s *Shard) index() {
	s.byID = map[string]map[string]Line{}
	rv := s.rv()
	for n := range s.Values {
		if !s.OwnedBy(n) {
			continue
		}
		lines, _ := s.Lines(n)
		for _, l := range lines {
			if l.Seq > rv {
				continue
			}
			if s.byID[l.Identity] == nil {
				s.byID[l.Identity] = map[string]Line{}
			}
			if _, seen := s.byID[l.Identity][n]; !seen {
				s.byID[l.Identity][n] = l
			}
		}
	}
}

// ClaimSeq returns the Seq a claim of identity by node must carry to be
// taken on this shard: its resourceVersion, which is above every other
// node's claim of the identity (each was at most the resourceVersion it
// was written on, and every write since has raised it); 0 for a shard
// that does not exist. A view older than the shard may give too small a
// Seq: the index policy then refuses the claim as stale.
func (s *Shard) ClaimSeq() uint64 { return s.rv() }

// StaleOwn returns the UIDs of node's own references other than uid (its
// Node deleted and registered again since it wrote them): its next write
// removes them. No reference UID is ever shared (the index policy), so
// removing by UID removes those only.
func (s *Shard) StaleOwn(node string, uid types.UID) []types.UID {
	var out []types.UID
	for _, r := range s.Refs {
		if r.Kind == "Node" && r.Name == node && r.UID != uid {
			out = append(out, r.UID)
		}
	}
	return out
}
