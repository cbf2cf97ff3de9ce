package apiclient

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// StatefulSets is the apps/v1 resource checkpointd watches, to follow a
// StatefulSet pod's reservation as its volumes are (issue 51).
const StatefulSets = "statefulsets"

// AppsV1 is the API group and version of StatefulSet.
var AppsV1 = schema.GroupVersion{Group: "apps", Version: "v1"}

// StatefulSet is what checkpointd reads of an apps/v1 StatefulSet: its
// name, UID and deletion, its size, its first ordinal and the retention of
// its volumes. The API server's JSON is decoded into this type, so the rest
// (its pod template above all) is dropped as it is read, never kept; the
// typed k8s.io/api/apps/v1 would link a whole API group into checkpointd
// (test/build).
type StatefulSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              StatefulSetSpec `json:"spec,omitempty"`
}

// StatefulSetSpec is the part of the spec checkpointd reads.
type StatefulSetSpec struct {
	// Replicas is the desired size (nil: 1).
	Replicas *int32 `json:"replicas,omitempty"`
	// Ordinals.Start is the first ordinal (nil: 0).
	Ordinals *StatefulSetOrdinals `json:"ordinals,omitempty"`
	// PersistentVolumeClaimRetentionPolicy says how long the pods' volumes
	// outlive them (nil, or a field empty: Retain).
	PersistentVolumeClaimRetentionPolicy *PVCRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`
}

// StatefulSetOrdinals is spec.ordinals.
type StatefulSetOrdinals struct {
	Start int32 `json:"start,omitempty"`
}

// PVCRetentionPolicy is spec.persistentVolumeClaimRetentionPolicy.
type PVCRetentionPolicy struct {
	WhenDeleted string `json:"whenDeleted,omitempty"`
	WhenScaled  string `json:"whenScaled,omitempty"`
}

// StatefulSetList is a list of StatefulSet.
type StatefulSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StatefulSet `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (s *StatefulSet) DeepCopyObject() runtime.Object {
	if s == nil {
		return nil
	}
	out := *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if s.Spec.Replicas != nil {
		n := *s.Spec.Replicas
		out.Spec.Replicas = &n
	}
	if s.Spec.Ordinals != nil {
		o := *s.Spec.Ordinals
		out.Spec.Ordinals = &o
	}
	if s.Spec.PersistentVolumeClaimRetentionPolicy != nil {
		p := *s.Spec.PersistentVolumeClaimRetentionPolicy
		out.Spec.PersistentVolumeClaimRetentionPolicy = &p
	}
	return &out
}

// DeepCopyObject implements runtime.Object.
func (l *StatefulSetList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]StatefulSet, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*StatefulSet)
	}
	return &out
}

// AppsScheme knows StatefulSet and StatefulSetList as apps/v1, and nothing
// else of the group.
var AppsScheme = runtime.NewScheme()

// AppsCodecs decode AppsScheme's types (JSON: the types have no protobuf).
var AppsCodecs = serializer.NewCodecFactory(AppsScheme)

func init() {
	AppsScheme.AddKnownTypes(AppsV1, &StatefulSet{}, &StatefulSetList{})
	metav1.AddToGroupVersion(AppsScheme, AppsV1)
}

// appsClient is a REST client of apps/v1 with cfg, speaking JSON.
func appsClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &AppsV1
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = AppsCodecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// ListWatchStatefulSets lists and watches the StatefulSets of every
// namespace, for an informer (on a client without a request timeout).
func (c *Client) ListWatchStatefulSets() cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.apps, StatefulSets, metav1.NamespaceAll, fields.Everything())
}
