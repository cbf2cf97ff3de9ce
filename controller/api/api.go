// Package api is stickyip-controller's client of the placement API
// (stickyip.io/v1, contract/placementv1): client-go's REST client with a
// scheme that knows that group alone, in JSON (the only encoding the API
// server serves custom resources in). The controller writes NodeRecord
// status through the status subresource, never the spec (the node's); the
// index's shards are ConfigMaps, written through client-go.
package api

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// Scheme knows stickyip.io/v1 (and the meta/v1 types every group
// carries); the Event recorder also finds a NodeRecord's kind in it.
var Scheme = runtime.NewScheme()

// Codecs encode and decode the types of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

var parameters = runtime.NewParameterCodec(Scheme)

func init() {
	utilruntime.Must(placementv1.AddToScheme(Scheme))
}

// Client reaches NodeRecords on one API server.
type Client struct {
	req   *rest.RESTClient // every request, bounded by the config's Timeout
	watch *rest.RESTClient // the informers' lists and watches: no request timeout
}

// New returns a client with cfg.
func New(cfg *rest.Config) (*Client, error) {
	req, err := restClient(cfg)
	if err != nil {
		return nil, err
	}
	wc := rest.CopyConfig(cfg)
	wc.Timeout = 0
	watch, err := restClient(wc)
	if err != nil {
		return nil, err
	}
	return &Client{req: req, watch: watch}, nil
}

func restClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &placementv1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("placement API client: %w", err)
	}
	return rc, nil
}

// RecordsListWatch lists and watches every NodeRecord, for an informer.
func (c *Client) RecordsListWatch() *cache.ListWatch {
	return c.listWatch(placementv1.NodeRecordResource, &placementv1.NodeRecordList{})
}

func (c *Client) listWatch(resource string, list runtime.Object) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			out := list.DeepCopyObject()
			return out, c.watch.Get().Resource(resource).VersionedParams(&opts, parameters).Do(ctx).Into(out)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return c.watch.Get().Resource(resource).VersionedParams(&opts, parameters).Watch(ctx)
		},
	}
}

// PatchRecordStatus applies the JSON merge patch to NodeRecord name's
// status (the status subresource) and returns the record it left.
func (c *Client) PatchRecordStatus(ctx context.Context, name string, patch []byte) (*placementv1.NodeRecord, error) {
	out := &placementv1.NodeRecord{}
	err := c.req.Patch(types.MergePatchType).Resource(placementv1.NodeRecordResource).Name(name).SubResource("status").
		Body(patch).Do(ctx).Into(out)
	return out, err
}

// DeleteRecord deletes NodeRecord name if its UID is still uid.
func (c *Client) DeleteRecord(ctx context.Context, name string, uid types.UID) error {
	return c.req.Delete().Resource(placementv1.NodeRecordResource).Name(name).
		Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}).Do(ctx).Error()
}
