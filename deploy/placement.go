package deploy

import (
	"embed"
	"fmt"
	"io/fs"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Placement holds deploy/placement: the index policy, the placement hint,
// the pod policy and the namespace opt-in operators apply with `kubectl
// apply -k deploy/placement`, and in placement/nodes the RBAC that lets
// nodes write the index, applied once the index policy is in effect.
//
//go:embed placement/*.yaml placement/Kustomization placement/nodes/*.yaml placement/nodes/Kustomization
var Placement embed.FS

// PlacementObjects decodes every object of deploy/placement, strictly (an
// unknown field or kind is an error), by "Kind/name": the admission
// policies and their bindings as admissionregistration/v1 types, the RBAC as
// rbac/v1 ones.
func PlacementObjects() (map[string]any, error) {
	out := map[string]any{}
	files, err := fs.Glob(Placement, "placement/*.yaml")
	if err != nil {
		return nil, err
	}
	nodes, err := fs.Glob(Placement, "placement/nodes/*.yaml")
	if err != nil {
		return nil, err
	}
	files = append(files, nodes...)
	for _, f := range files {
		data, err := fs.ReadFile(Placement, f)
		if err != nil {
			return nil, err
		}
		err = eachObject(data, func(kind, name string, doc []byte) error {
			obj, err := placementObject(kind)
			if err != nil {
				return err
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				return fmt.Errorf("%s: %w", kind, err)
			}
			out[kind+"/"+name] = obj
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("deploy/%s: %w", f, err)
		}
	}
	return out, nil
}

// placementObject is an empty object of kind, one of those deploy/placement
// holds.
func placementObject(kind string) (any, error) {
	switch kind {
	case "ValidatingAdmissionPolicy":
		return &admissionv1.ValidatingAdmissionPolicy{}, nil
	case "ValidatingAdmissionPolicyBinding":
		return &admissionv1.ValidatingAdmissionPolicyBinding{}, nil
	case "MutatingAdmissionPolicy":
		return &admissionv1.MutatingAdmissionPolicy{}, nil
	case "MutatingAdmissionPolicyBinding":
		return &admissionv1.MutatingAdmissionPolicyBinding{}, nil
	case "ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %s", kind)
}
