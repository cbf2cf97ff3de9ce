package policycheck

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
)

// What admission_test.go needs that Kubernetes 1.36's and 1.37's APIs do not
// share, and where this module finds deploy/placement and the cases.

// kubeMinor is the release whose CEL libraries this module builds with
// (go.mod: k8s.io/apiserver).
const kubeMinor = "1.36"

const (
	placementDir = "../../placement"
	testdataDir  = "../testdata"
)

// setObject puts a mutation's result into vattr, as the mutating
// dispatcher does (1.36: the object itself, converted again to
// unstructured at each evaluation).
func setObject(vattr *admission.VersionedAttributes, obj runtime.Object) {
	vattr.VersionedObject = obj
	vattr.Dirty = true
}
