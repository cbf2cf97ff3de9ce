package placement

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// Shard is a shard of the index as the API server showed it.
type Shard struct {
	Exists bool            // false: no such object (yet)
	Holds  map[string]Hold // by identity
	Owners []string        // names of the Nodes it has an ownerReference to
}

// Own returns the entries of shard s naming node.
func (s *Shard) Own(node string) map[string]Hold {
	out := map[string]Hold{}
	for id, h := range s.Holds {
		if h.Node == node {
			out[id] = h
		}
	}
	return out
}

// OwnedBy reports whether node has an ownerReference on the shard.
func (s *Shard) OwnedBy(node string) bool { return slices.Contains(s.Owners, node) }

// DecodeShard reads a shard. An entry that cannot be read is an error: the
// publisher then leaves the shard alone rather than decide on part of it.
func DecodeShard(cm *corev1.ConfigMap) (*Shard, error) {
	s := &Shard{Exists: true, Holds: map[string]Hold{}}
	for _, r := range cm.OwnerReferences {
		if r.Kind == "Node" {
			s.Owners = append(s.Owners, r.Name)
		}
	}
	for id, v := range cm.Data {
		h, err := entry.Parse(v)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s: %w", cm.Namespace, cm.Name, id, err)
		}
		s.Holds[id] = h
	}
	return s, nil
}

// applyConfig is what node applies to shard ns/name: the index label,
// exactly its entries mine and, while it has any entry, its ownerReference
// to its Node (uid). With an empty mine the API server removes every entry
// and the ownerReference the node applied before; the label stays (the
// shard's other writers apply it too).
func applyConfig(ns, name, node string, uid types.UID, mine map[string]Hold) *corev1ac.ConfigMapApplyConfiguration {
	cm := corev1ac.ConfigMap(name, ns).WithLabels(map[string]string{IndexLabel: shardNumber(name)})
	if len(mine) == 0 {
		return cm
	}
	data := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(mine)) {
		data[id] = mine[id].String()
	}
	return cm.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("Node").WithName(node).WithUID(uid)).
		WithData(data)
}
