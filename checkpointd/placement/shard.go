package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// timeFormat is how Since is written: RFC 3339 in UTC, to the millisecond
// (two claims of one identity a second apart must compare).
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

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
		h, err := ParseHold(v)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s: %w", cm.Namespace, cm.Name, id, err)
		}
		s.Holds[id] = h
	}
	return s, nil
}

// ParseHold reads an entry: "<node> <pod> <since> <ip>[,<ip>…]", the form
// the placement policy splits.
func ParseHold(v string) (Hold, error) {
	f := strings.Split(v, " ")
	if len(f) != 4 || f[0] == "" || f[1] == "" || f[3] == "" {
		return Hold{}, fmt.Errorf("entry %q: want \"<node> <pod> <since> <ip>[,<ip>…]\"", v)
	}
	since, err := time.Parse(time.RFC3339Nano, f[2])
	if err != nil {
		return Hold{}, fmt.Errorf("entry %q: since: %w", v, err)
	}
	return Hold{Node: f[0], Pod: f[1], Since: since, IPs: strings.Split(f[3], ",")}, nil
}

// String renders h as an entry.
func (h Hold) String() string {
	return strings.Join([]string{h.Node, h.Pod, h.Since.UTC().Format(timeFormat), strings.Join(h.IPs, ",")}, " ")
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
