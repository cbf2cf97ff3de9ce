package placementv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API's names, as the custom resource definitions give them.
const (
	Group   = "stickyip.io"
	Version = "v1"

	NodeRecordKind     = "NodeRecord"
	NodeRecordResource = "noderecords"
)

// SchemeGroupVersion is stickyip.io/v1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers the API's types in a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &NodeRecord{}, &NodeRecordList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
