package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// RecordsScheme knows the placement API's types and nothing else.
var RecordsScheme = runtime.NewScheme()

// RecordsCodecs encode and decode RecordsScheme's types (JSON: a custom
// resource has no protobuf).
var RecordsCodecs = serializer.NewCodecFactory(RecordsScheme)

func init() {
	utilruntime.Must(placementv1.AddToScheme(RecordsScheme))
}

// recordsClient is a REST client of stickyip.io/v1 with cfg, speaking JSON.
func recordsClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &placementv1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = RecordsCodecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// GetRecord reads the NodeRecord name.
func (c *REST) GetRecord(ctx context.Context, name string) (*placementv1.NodeRecord, error) {
	var r placementv1.NodeRecord
	err := c.rec.Get().Resource(placementv1.NodeRecordResource).Name(name).Do(ctx).Into(&r)
	return &r, err
}

// CreateRecord creates r; the record as created is returned.
func (c *REST) CreateRecord(ctx context.Context, r *placementv1.NodeRecord, fieldManager string) (*placementv1.NodeRecord, error) {
	var out placementv1.NodeRecord
	opts := metav1.CreateOptions{FieldManager: fieldManager}
	err := c.rec.Post().Resource(placementv1.NodeRecordResource).VersionedParams(&opts, metav1.ParameterCodec).
		Body(r).Do(ctx).Into(&out)
	return &out, err
}

// PatchRecord patches the NodeRecord name with a JSON merge patch; the
// record as patched is returned.
func (c *REST) PatchRecord(ctx context.Context, name string, data []byte, fieldManager string) (*placementv1.NodeRecord, error) {
	var out placementv1.NodeRecord
	opts := metav1.PatchOptions{FieldManager: fieldManager}
	err := c.rec.Patch(types.MergePatchType).Resource(placementv1.NodeRecordResource).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx).Into(&out)
	return &out, err
}

// ListWatchRecord lists and watches the NodeRecord name alone
// (metadata.name=<name>), for an informer (on a client without a request
// timeout).
func (c *REST) ListWatchRecord(name string) cache.ListerWatcher {
	return cache.NewListWatchFromClient(c.recW, placementv1.NodeRecordResource, metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", name))
}
