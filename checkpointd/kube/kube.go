// Package kube is checkpointd's view of the API server: the pods bound to the
// node (a client-go informer whose list/watch is filtered by the field
// selector spec.nodeName=<node>, so the API server pushes changes instead of
// being polled; the watch is long-lived, on a client without a request
// timeout), its own Node (watched the same way, for its pod CIDRs), whether
// the API server is reachable, the secrets and configMaps a
// checkpoint needs (read one by one, as the Node authorizer allows a node to),
// and Events on pods.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Options configure a Client.
type Options struct {
	// Node is the node name; only pods with spec.nodeName equal to it are watched.
	Node string
	// ProbeInterval is how often reachability is probed (default 5s).
	ProbeInterval time.Duration
	// Timeout bounds every request (default 5s).
	Timeout time.Duration
	// Probe checks the API server; default GET /readyz.
	Probe func(ctx context.Context) error
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Log receives state changes.
	Log *slog.Logger
}

// Client watches the node's pods and tracks reachability.
type Client struct {
	cs       *REST
	opts     Options
	informer cache.SharedIndexInformer // the pods bound to the node
	nodes    cache.SharedIndexInformer // the node's own Node

	mu        sync.Mutex
	reachable bool
	since     time.Time // when reachable last changed (daemon start if never reached)
	lastErr   error
	probed    bool
}

// New returns a client; call Run to start it.
func New(cs *REST, opts Options) *Client {
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	c := &Client{cs: cs, opts: opts, since: opts.Now()}
	if c.opts.Probe == nil {
		c.opts.Probe = c.readyz
	}
	c.informer = informer(cs, Pods, fields.OneTermEqualSelector("spec.nodeName", opts.Node).String(), &corev1.Pod{})
	// The node's own Node: metadata.name=<node>, the only Node a kubelet's
	// credentials may list.
	c.nodes = informer(cs, Nodes, fields.OneTermEqualSelector("metadata.name", opts.Node).String(), &corev1.Node{})
	_ = c.nodes.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			c.opts.Log.Warn("Node watch refused by the API server", "err", err)
		}
	})
	_ = c.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		var status apierrors.APIStatus
		switch {
		case errors.Is(err, io.EOF):
			// A watch the server closed normally; the reflector re-watches.
		case errors.As(err, &status):
			// The API server answered (e.g. 403: RBAC, 410: relist). It is
			// not away, so this must neither start restores nor stop them.
			c.opts.Log.Warn("pod watch refused by the API server", "err", err)
		default:
			c.set(false, fmt.Errorf("pod watch: %w", err))
		}
	})
	return c
}

// informer lists and watches the objects of resource the field selector
// picks, keeping them without their managedFields (nothing here reads them,
// and they are often the largest part of a pod's metadata).
func informer(cs *REST, resource, selector string, example runtime.Object) cache.SharedIndexInformer {
	i := cache.NewSharedIndexInformer(cs.ListWatch(resource, selector), example, 0, cache.Indexers{})
	_ = i.SetTransform(func(o any) (any, error) {
		if m, err := meta.Accessor(o); err == nil {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	return i
}

func (c *Client) readyz(ctx context.Context) error { return c.cs.Readyz(ctx) }

// Run starts the informer and the probe loop; it returns when ctx is done.
func (c *Client) Run(ctx context.Context) {
	go c.informer.RunWithContext(ctx)
	go c.nodes.RunWithContext(ctx)
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		c.probe(ctx)
		select {
		case <-ctx.Done():
			// The informers stop with ctx; Run does not wait for them:
			// a reflector backing off from an
			// API server that is away notices only at the end of its
			// back-off, up to 30 s, and checkpointd's shutdown, which
			// removes its static copies, must not wait for that (a cold CI
			// run's TestCheckpointd saw checkpointd killed after 30 s with
			// a copy left running).
			return
		case <-t.C:
		}
	}
}

func (c *Client) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	err := c.opts.Probe(pctx)
	if ctx.Err() != nil {
		return
	}
	c.set(err == nil, err)
}

func (c *Client) set(ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
	first := !c.probed
	c.probed = true
	if ok == c.reachable && !first {
		return
	}
	if ok == c.reachable {
		// First probe, still unreachable: say so once (since stays at start).
		c.opts.Log.Warn("API server not reachable", "err", err)
		return
	}
	c.reachable = ok
	c.since = c.opts.Now()
	if ok {
		c.opts.Log.Info("API server reachable")
	} else {
		c.opts.Log.Warn("API server unreachable", "err", err)
	}
}

// Reachable reports whether the API server answered the last probe and the
// pod watch has synced, and since when that has been the case (for an
// unreachable API server never reached, since the client was created).
func (c *Client) Reachable() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reachable && !c.informer.HasSynced() {
		// The API server answers but the pod list has not arrived (yet, or
		// RBAC forbids it): not reachable for decisions, but not away either,
		// so the unreachability clock is held at zero and nothing is restored.
		return false, c.opts.Now()
	}
	return c.reachable, c.since
}

// Pods returns the pods bound to the node, from the watch cache, and whether
// the cache has synced at least once.
func (c *Client) Pods() ([]*corev1.Pod, bool) {
	var out []*corev1.Pod
	for _, o := range c.informer.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName == c.opts.Node {
			out = append(out, p)
		}
	}
	return out, c.informer.HasSynced()
}

// Object returns the data of a Secret or a ConfigMap (kind "Secret" or "ConfigMap").
func (c *Client) Object(ctx context.Context, kind, ns, name string) (map[string][]byte, error) {
	switch kind {
	case "Secret":
		return c.Secret(ctx, ns, name)
	case "ConfigMap":
		return c.ConfigMap(ctx, ns, name)
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// Secret returns a secret's data.
func (c *Client) Secret(ctx context.Context, ns, name string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var s corev1.Secret
	if err := c.cs.Get(ctx, Secrets, ns, name, &s); err != nil {
		return nil, err
	}
	return s.Data, nil
}

// ConfigMap returns a configMap's data and binaryData as bytes.
func (c *Client) ConfigMap(ctx context.Context, ns, name string) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var cm corev1.ConfigMap
	if err := c.cs.Get(ctx, ConfigMaps, ns, name, &cm); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out, nil
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }
