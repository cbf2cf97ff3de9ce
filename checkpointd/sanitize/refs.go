package sanitize

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/podspec"
)

// Ref is one secret or configMap a checkpoint of a pod needs, and which of
// its keys.
type Ref struct {
	Kind string // "Secret" or "ConfigMap"
	Name string
	// Keys lists the keys the pod uses; nil means every key (a volume
	// without items, or envFrom).
	Keys []string
	// Optional: every reference to the object is optional, so a missing
	// object is not an error.
	Optional bool
}

// Refs returns the secrets and configMaps whose data a checkpoint of pod
// needs, with the keys it uses: secrets mounted by volumes, configMaps
// mounted by volumes or read by the environment. Secrets read only by the
// environment are not returned: they are never restored (see the package
// documentation), so they are never read.
func Refs(pod *corev1.Pod) []Ref {
	type acc struct {
		all      bool
		keys     map[string]bool
		optional bool
	}
	refs := map[[2]string]*acc{}
	note := func(kind, name string, items []corev1.KeyToPath, optional *bool) {
		k := [2]string{kind, name}
		a := refs[k]
		if a == nil {
			a = &acc{keys: map[string]bool{}, optional: true}
			refs[k] = a
		}
		a.optional = a.optional && isTrue(optional)
		if items == nil {
			a.all = true
		}
		for _, it := range items {
			a.keys[it.Key] = true
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Secret != nil:
			note("Secret", v.Secret.SecretName, nilIfEmpty(v.Secret.Items), v.Secret.Optional)
		case v.ConfigMap != nil:
			note("ConfigMap", v.ConfigMap.Name, nilIfEmpty(v.ConfigMap.Items), v.ConfigMap.Optional)
		case v.Projected != nil:
			if hasToken(v.Projected) {
				continue // dropped with its token
			}
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					note("Secret", src.Secret.Name, nilIfEmpty(src.Secret.Items), src.Secret.Optional)
				}
				if src.ConfigMap != nil {
					note("ConfigMap", src.ConfigMap.Name, nilIfEmpty(src.ConfigMap.Items), src.ConfigMap.Optional)
				}
			}
		}
	}
	kept := pod.Spec
	kept.EphemeralContainers = nil // not in the copy
	for _, ctr := range podspec.Containers(&kept) {
		for _, ef := range ctr.EnvFrom {
			if ef.ConfigMapRef != nil {
				note("ConfigMap", ef.ConfigMapRef.Name, nil, ef.ConfigMapRef.Optional)
			}
		}
		for _, e := range ctr.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				r := e.ValueFrom.ConfigMapKeyRef
				note("ConfigMap", r.Name, []corev1.KeyToPath{{Key: r.Key}}, r.Optional)
			}
		}
	}
	out := make([]Ref, 0, len(refs))
	for k, a := range refs {
		r := Ref{Kind: k[0], Name: k[1], Optional: a.optional}
		if !a.all {
			r.Keys = sortedKeys(a.keys)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Filter keeps the keys of data that r names (every key when r.Keys is nil).
func (r Ref) Filter(data map[string][]byte) map[string][]byte {
	if r.Keys == nil {
		return data
	}
	out := make(map[string][]byte, len(r.Keys))
	for _, k := range r.Keys {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

func nilIfEmpty(items []corev1.KeyToPath) []corev1.KeyToPath {
	if len(items) == 0 {
		return nil
	}
	return items
}
