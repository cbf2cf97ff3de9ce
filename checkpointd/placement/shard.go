package placement

import (
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// timeFormat is how Since is written: RFC 3339 in UTC, to
// the millisecond (two claims of one identity a second apart must compare).
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Shard is an IPHoldShard as the API server showed it.
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

// DecodeShard reads an IPHoldShard. An entry that cannot be read is an
// error: the publisher then leaves the shard alone rather than decide on
// part of it.
func DecodeShard(u *unstructured.Unstructured) (*Shard, error) {
	s := &Shard{Exists: true, Holds: map[string]Hold{}}
	for _, r := range u.GetOwnerReferences() {
		if r.Kind == "Node" {
			s.Owners = append(s.Owners, r.Name)
		}
	}
	holds, _, err := unstructured.NestedMap(u.Object, "spec", "holds")
	if err != nil {
		return nil, fmt.Errorf("IPHoldShard %s/%s: spec.holds: %w", u.GetNamespace(), u.GetName(), err)
	}
	for id, v := range holds {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("IPHoldShard %s/%s: spec.holds[%q] is not an object", u.GetNamespace(), u.GetName(), id)
		}
		h, err := decodeHold(m)
		if err != nil {
			return nil, fmt.Errorf("IPHoldShard %s/%s: spec.holds[%q]: %w", u.GetNamespace(), u.GetName(), id, err)
		}
		s.Holds[id] = h
	}
	return s, nil
}

func decodeHold(m map[string]any) (Hold, error) {
	var h Hold
	str := func(k string) string { v, _ := m[k].(string); return v }
	h.Node, h.Pod = str("node"), str("pod")
	ips, _, _ := unstructured.NestedStringSlice(m, "ips")
	h.IPs = ips
	if v := str("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return h, fmt.Errorf("since %q: %w", v, err)
		}
		h.Since = t
	}
	if h.Node == "" || h.Pod == "" {
		return h, fmt.Errorf("no node or pod")
	}
	return h, nil
}

// encodeHold renders h as a spec.holds value.
func encodeHold(h Hold) map[string]any {
	ips := make([]any, len(h.IPs))
	for i, ip := range h.IPs {
		ips[i] = ip
	}
	return map[string]any{"node": h.Node, "pod": h.Pod, "ips": ips, "since": h.Since.UTC().Format(timeFormat)}
}

// applyConfig is what node applies to shard ns/name: exactly its entries
// mine, and, while it has any, its ownerReference to its Node (uid). An
// empty mine applies nothing but the name: the API server then removes
// every entry and the ownerReference the node applied before.
func applyConfig(ns, name, node string, uid types.UID, mine map[string]Hold) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Resource.GroupVersion().String(), "kind": Kind,
	}}
	u.SetNamespace(ns)
	u.SetName(name)
	if len(mine) == 0 {
		return u
	}
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}})
	holds := map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(mine)) {
		holds[id] = encodeHold(mine[id])
	}
	u.Object["spec"] = map[string]any{"holds": holds}
	return u
}
