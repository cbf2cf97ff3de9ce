package deploy

import (
	"embed"
	"fmt"
	"io/fs"
	"path"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// Placement holds deploy/placement: the placement API's CRD, the admission
// policies (the placement hint among them) and stickyip-controller, which
// operators apply with `kubectl apply -k deploy/placement`; probe.yaml, the
// NodeRecord whose refused dry-run creation shows stickyip-node-records in
// effect; in placement/nodes the RBAC that lets nodes write their records
// and the controller the index's ConfigMaps, applied only then.
//
//go:embed placement/*.yaml placement/Kustomization placement/nodes/*.yaml placement/nodes/Kustomization
//go:embed placement/cluster-default/kustomization.yaml
var Placement embed.FS

// Directories of deploy/placement applied apart, each with a Kustomization.
const (
	PlacementDir      = "placement"
	PlacementNodesDir = "placement/nodes"
	// PlacementProbe is the install probe, listed in no Kustomization.
	PlacementProbe = "placement/probe.yaml"
)

// stickyip-controller's names, as deploy/placement gives them.
const (
	ControllerName      = "stickyip-controller"
	ControllerNamespace = "kube-system"
	// ControllerListen is its --listen-address: readiness, liveness and
	// metrics.
	ControllerListen = ":9612"
)

// PlacementFiles returns the files the Kustomization of dir (one of
// PlacementDir, PlacementNodesDir) lists, in its order,
// as paths of Placement.
func PlacementFiles(dir string) ([]string, error) {
	b, err := fs.ReadFile(Placement, path.Join(dir, "Kustomization"))
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("deploy/%s/Kustomization: %w", dir, err)
	}
	out := make([]string, len(k.Resources))
	for i, r := range k.Resources {
		out[i] = path.Join(dir, r)
	}
	return out, nil
}

// PlacementObjects decodes every object the Kustomizations of
// deploy/placement and placement/nodes list, strictly (an
// unknown field or kind is an error), by "Kind/name": the admission policies
// and their bindings as admissionregistration/v1 types, the RBAC as rbac/v1
// ones, the controller as core/v1 and apps/v1 ones. The CRDs come as
// unstructured objects: this module does not build with apiextensions'
// types (deploy/policycheck decodes them strictly).
func PlacementObjects() (map[string]any, error) {
	out := map[string]any{}
	for _, dir := range []string{PlacementDir, PlacementNodesDir} {
		files, err := PlacementFiles(dir)
		if err != nil {
			return nil, err
		}
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
				if u, ok := obj.(*unstructured.Unstructured); ok {
					var j []byte
					if j, err = yaml.YAMLToJSON(doc); err == nil {
						err = u.UnmarshalJSON(j) // integers as int64
					}
				} else {
					err = yaml.UnmarshalStrict(doc, obj)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", kind, err)
				}
				if _, dup := out[kind+"/"+name]; dup {
					return fmt.Errorf("%s/%s: a second object of that kind and name", kind, name)
				}
				out[kind+"/"+name] = obj
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("deploy/%s: %w", f, err)
			}
		}
	}
	return out, nil
}

// Probe decodes deploy/placement/probe.yaml, strictly.
func Probe() (*placementv1.NodeRecord, error) {
	data, err := fs.ReadFile(Placement, PlacementProbe)
	if err != nil {
		return nil, err
	}
	r := &placementv1.NodeRecord{}
	if err := yaml.UnmarshalStrict(data, r); err != nil {
		return nil, fmt.Errorf("deploy/%s: %w", PlacementProbe, err)
	}
	return r, nil
}

// placementObject is an empty object of kind, one of those deploy/placement
// holds.
func placementObject(kind string) (any, error) {
	switch kind {
	case "CustomResourceDefinition":
		return &unstructured.Unstructured{}, nil
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
	case "Role":
		return &rbacv1.Role{}, nil
	case "RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "FlowSchema":
		return &flowcontrolv1.FlowSchema{}, nil
	case "PriorityLevelConfiguration":
		return &flowcontrolv1.PriorityLevelConfiguration{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %s", kind)
}
