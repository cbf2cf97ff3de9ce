// REST is checkpointd's client of the API server: the core/v1 resources it
// uses (pods, its Node, Secrets, ConfigMaps, Events), on client-go's REST
// client with a scheme that knows core/v1 alone, and the node's own
// NodeRecord of the placement API (records.go).
//
// The typed clientset (k8s.io/client-go/kubernetes) registers every API
// group of Kubernetes in its scheme and links a typed client, lister and
// apply configuration for each: most of a 62 MB binary and of its resident
// memory, for a daemon that reads and writes five core resources.
// Even the typed core/v1 client alone imports that scheme.

package kube

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The resources checkpointd uses, as the API names them.
const (
	Pods       = "pods"
	Nodes      = "nodes"
	Secrets    = "secrets"
	ConfigMaps = "configmaps"
	Events     = "events"
)

// Scheme knows the core/v1 types (and the meta/v1 ones every group
// carries: options, Status, WatchEvent); nothing else.
var Scheme = runtime.NewScheme()

// Codecs encode and decode the types of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
}

// built counts the clients New made (Built).
var built atomic.Int64

// Built returns how many clients this process has made: checkpointd makes
// one, shared by its informers, probe, Events and placement publisher (a
// test holds it to that).
func Built() int64 { return built.Load() }

// Client reaches the core/v1 resources of one API server.
type REST struct {
	cfg   *rest.Config
	req   *rest.RESTClient // every request, bounded by the config's Timeout
	watch *rest.RESTClient // the informers' lists and watches: no request timeout
	probe *rest.RESTClient // /readyz: no client-side rate limit
	rec   *rest.RESTClient // NodeRecords: every request, bounded by the config's Timeout
	recW  *rest.RESTClient // the node's NodeRecord's list and watch: no request timeout
}

// New returns a client with cfg (its Timeout bounds every request but the
// informers' watches, which must stay open: client-go ends each itself after
// 5-10 minutes, with a timeout the server honours).
//
// Responses come uncompressed, as kube-controller-manager and
// kube-scheduler ask for them (DisableCompression): kube-apiserver 1.37
// answered the pod watch gzipped, and the node decompressed every pod
// change (6 % of checkpointd's CPU during a churn of pods, workload 8)
// to save bytes on a link that carries one node's pods.
func NewREST(cfg *rest.Config) (*REST, error) {
	built.Add(1)
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true
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
	// The reachability probe does not queue behind the requests' rate
	// limit (a burst of Secret reads at start would make it time out, and
	// the API server look away): it is paced by its own interval.
	pc := rest.CopyConfig(cfg)
	pc.QPS, pc.RateLimiter = -1, nil
	probe, err := restClient(pc)
	if err != nil {
		return nil, err
	}
	rec, err := recordsClient(cfg)
	if err != nil {
		return nil, err
	}
	recW, err := recordsClient(wc)
	if err != nil {
		return nil, err
	}
	return &REST{cfg: rest.CopyConfig(cfg), req: req, watch: watch, probe: probe, rec: rec, recW: recW}, nil
}

// WithOwnRateLimit returns a client that shares c's connections, and
// whose requests have a rate limit of their own (the config's QPS and
// burst): for a user whose requests must not queue behind another's (the
// placement publisher's claims behind a burst of Events).
func (c *REST) WithOwnRateLimit() (*REST, error) {
	req, err := restClient(c.cfg)
	if err != nil {
		return nil, err
	}
	rec, err := recordsClient(c.cfg)
	if err != nil {
		return nil, err
	}
	return &REST{cfg: c.cfg, req: req, watch: c.watch, probe: c.probe, rec: rec, recW: c.recW}, nil
}

// restClient is a REST client of core/v1 with cfg.
func restClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	// Protobuf, as the kubelet speaks it: the pods of the watch, the
	// Secrets and ConfigMaps, the Events decode and encode several times
	// cheaper than in JSON (a server that answers JSON is read as well).
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// Get reads object ns/name of resource into into (ns "": a cluster-scoped
// resource, a Node).
func (c *REST) Get(ctx context.Context, resource, ns, name string, into runtime.Object) error {
	return in(c.req.Get(), ns).Resource(resource).Name(name).Do(ctx).Into(into)
}

// List lists resource in ns ("": every namespace, or a cluster-scoped
// resource) into into.
func (c *REST) List(ctx context.Context, resource, ns string, opts metav1.ListOptions, into runtime.Object) error {
	return in(c.req.Get(), ns).Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(into)
}

// Create creates obj as resource in ns; the object as created goes into into.
func (c *REST) Create(ctx context.Context, resource, ns string, obj runtime.Object, opts metav1.CreateOptions, into runtime.Object) error {
	return in(c.req.Post(), ns).Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx).Into(into)
}

// Patch patches object ns/name of resource with data (of type pt); the
// object as patched goes into into.
func (c *REST) Patch(ctx context.Context, resource, ns, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, into runtime.Object) error {
	return in(c.req.Patch(pt), ns).Resource(resource).Name(name).VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx).Into(into)
}

// in scopes r to namespace ns; "" leaves it unscoped (client-go refuses an
// empty namespace beside a name: a cluster-scoped object has none).
func in(r *rest.Request, ns string) *rest.Request {
	if ns == "" {
		return r
	}
	return r.Namespace(ns)
}

// Readyz asks the API server's /readyz.
func (c *REST) Readyz(ctx context.Context) error {
	_, err := c.probe.Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// ListWatch lists and watches resource in every namespace the field
// selector picks, for an informer (on the client without a request timeout).
func (c *REST) ListWatch(resource, fieldSelector string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(c.watch, resource, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.FieldSelector = fieldSelector })
}
