package placement

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// object renders r as the IPHold to create or update, owned by the node's
// Node (nodeUID), so the garbage collector removes it with the Node.
func (r Record) object(nodeUID types.UID) *unstructured.Unstructured {
	ips := make([]any, len(r.Spec.IPs))
	for i, ip := range r.Spec.IPs {
		ips[i] = ip
	}
	spec := map[string]any{
		"identity": r.Spec.Identity, "network": r.Spec.Network, "nodeName": r.Spec.NodeName,
		"ips": ips, "state": r.Spec.State,
	}
	if r.Spec.IfName != "" {
		spec["ifName"] = r.Spec.IfName
	}
	if !r.Spec.ExpiresAt.IsZero() {
		spec["expiresAt"] = r.Spec.ExpiresAt.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Resource.GroupVersion().String(), "kind": Kind, "spec": spec,
	}}
	u.SetNamespace(r.Namespace)
	u.SetName(r.Name)
	u.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "checkpointd"})
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: r.Spec.NodeName, UID: nodeUID}})
	return u
}

// specOf reads an IPHold's spec.
func specOf(u *unstructured.Unstructured) (Spec, error) {
	var s Spec
	str := func(k string) string { v, _, _ := unstructured.NestedString(u.Object, "spec", k); return v }
	s.Identity, s.Network, s.IfName, s.NodeName, s.State = str("identity"), str("network"), str("ifName"), str("nodeName"), str("state")
	s.IPs, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "ips")
	if v := str("expiresAt"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return s, fmt.Errorf("IPHold %s/%s: spec.expiresAt %q: %w", u.GetNamespace(), u.GetName(), v, err)
		}
		s.ExpiresAt = t
	}
	return s, nil
}

// ownedBy reports whether u's only owner is the Node with uid.
func ownedBy(u *unstructured.Unstructured, uid types.UID) bool {
	refs := u.GetOwnerReferences()
	return len(refs) == 1 && refs[0].Kind == "Node" && refs[0].UID == uid
}
