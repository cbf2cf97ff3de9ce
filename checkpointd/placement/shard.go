package placement

import (
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// Owner is an ownerReference of a shard to a Node.
type Owner struct {
	Name       string
	UID        types.UID
	APIVersion string
}

// Shard is a shard of the index as the API server showed it; it is not
// changed once decoded (Others indexes it on first use).
type Shard struct {
	Exists bool              // false: no such object (yet)
	RV     string            // its resourceVersion
	Values map[string]string // each node's value, by node name
	Owners []Owner           // its ownerReferences to Nodes

	indexOnce sync.Once
	byID      map[string]map[string]Line // owners' entries by identity, then node (Others)
}

// DecodeShard reads a shard.
func DecodeShard(cm *corev1.ConfigMap) *Shard {
	s := &Shard{Exists: true, RV: cm.ResourceVersion, Values: map[string]string{}}
	for _, r := range cm.OwnerReferences {
		if r.Kind == "Node" {
			s.Owners = append(s.Owners, Owner{Name: r.Name, UID: r.UID, APIVersion: r.APIVersion})
		}
	}
	for k, v := range cm.Data {
		s.Values[k] = v
	}
	return s
}

// OwnedBy reports whether node owns the shard (a v1 Node ownerReference):
// the placement policy counts only the entries of such nodes.
func (s *Shard) OwnedBy(node string) bool {
	return slices.ContainsFunc(s.Owners, func(o Owner) bool { return o.Name == node && o.APIVersion == "v1" })
}

// Lines returns node's entries in the shard, and what could not be read of
// them (skipped).
func (s *Shard) Lines(node string) ([]Line, []error) { return entry.ParseValue(s.Values[node]) }

// Others returns the entries for identity of the nodes other than node
// that own the shard, by node. The owners' values are parsed once per
// shard read, not once per identity asked about.
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

// index fills byID: each owner's first entry of each identity.
func (s *Shard) index() {
	s.byID = map[string]map[string]Line{}
	for n := range s.Values {
		if !s.OwnedBy(n) {
			continue
		}
		lines, _ := s.Lines(n)
		for _, l := range lines {
			if s.byID[l.Identity] == nil {
				s.byID[l.Identity] = map[string]Line{}
			}
			if _, seen := s.byID[l.Identity][n]; !seen {
				s.byID[l.Identity][n] = l
			}
		}
	}
}

// staleOwners returns the UIDs of node's ownerReferences other than uid (a
// Node deleted and registered again has a new UID).
func (s *Shard) staleOwners(node string, uid types.UID) []types.UID {
	var out []types.UID
	for _, o := range s.Owners {
		if o.Name == node && o.UID != uid {
			out = append(out, o.UID)
		}
	}
	return out
}
