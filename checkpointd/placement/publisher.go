package placement

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/reservation"
)

// Entries reads the IPAM store (checkpointd/ipamstore.Store).
type Entries interface {
	Entries() ([]reservation.Entry, error)
}

// Options configure a Publisher.
type Options struct {
	// Node is this node's name, as its credentials (system:node:<Node>) say.
	Node string
	// Store is the node's IPAM store.
	Store Entries
	// Interval is how often the store is compared with the records (default 5s).
	Interval time.Duration
	// Timeout bounds each API request (default 5s).
	Timeout time.Duration
	// Registry receives the publisher's metrics (nil: not exported).
	Registry prometheus.Registerer
	// Log receives every write and every new kind of failure.
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// settle is how long a key is left alone after a write while the watch has
// not yet shown it, so one change is written once.
const settle = 10 * time.Second

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// Publisher keeps the node's IPHold records equal to its IPAM store.
type Publisher struct {
	opts     Options
	client   dynamic.Interface
	informer cache.SharedIndexInformer

	writes  *prometheus.CounterVec
	errs    *prometheus.CounterVec
	records prometheus.Gauge

	nodeUID types.UID              // the Node's UID, read before each create
	expect  map[string]expectation // keys written and not yet seen by the watch
	logged  map[string]string      // last failure logged per step
	mu      sync.Mutex             // guards logged (the watch error handler runs elsewhere)
}

type expectation struct {
	rv   string // resourceVersion the write returned; "" for a delete
	gone bool
	at   time.Time
}

// New returns a publisher that reaches the API server with cfg (the node's
// own kubeconfig). Requests use cfg's timeout; the watch uses none.
func New(cfg *rest.Config, opts Options) (*Publisher, error) {
	req, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	wc := rest.CopyConfig(cfg)
	wc.Timeout = 0
	watch, err := dynamic.NewForConfig(wc)
	if err != nil {
		return nil, err
	}
	return NewWithClients(req, watch, opts), nil
}

// NewWithClients is New with given clients (req for requests, watch for the
// list+watch).
func NewWithClients(req, watch dynamic.Interface, opts Options) *Publisher {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	sel := fields.OneTermEqualSelector(NodeField, opts.Node).String()
	p := &Publisher{
		opts: opts, client: req,
		informer: dynamicinformer.NewFilteredDynamicInformer(watch, Resource, metav1.NamespaceAll, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.FieldSelector = sel }).Informer(),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_writes_total",
			Help: "IPHold records written to the API server, by verb (create at ADD, update at DEL, delete at expiry or release)."}, []string{"verb"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_errors_total",
			Help: "Failed placement steps, by step (store, node, create, update, delete, watch)."}, []string{"step"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: "placement_records",
			Help: "IPHold records this node means to have (its sticky identities)."}),
		expect: map[string]expectation{},
		logged: map[string]string{},
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(p.writes, p.errs, p.records)
	}
	_ = p.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		p.fail("watch", "", err)
	})
	return p
}

// Run publishes until ctx is done.
func (p *Publisher) Run(ctx context.Context) {
	go p.informer.Run(ctx.Done())
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass compares the store with the records once and writes the difference.
// Until the first list has answered it writes nothing (it cannot know what
// exists).
func (p *Publisher) Pass(ctx context.Context) {
	if !p.informer.HasSynced() {
		return
	}
	entries, err := p.opts.Store.Entries()
	if err != nil {
		p.fail("store", "", err)
		return
	}
	p.ok("store")
	now := p.opts.Now()
	want := Desired(p.opts.Node, entries, now)
	p.records.Set(float64(len(want)))
	have := map[string]*unstructured.Unstructured{}
	for _, o := range p.informer.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			if s, _ := specOf(u); s.NodeName == p.opts.Node {
				have[u.GetNamespace()+"/"+u.GetName()] = u
			}
		}
	}
	for key, w := range want {
		if p.settling(key, have[key], now) {
			continue
		}
		h := have[key]
		if h == nil {
			p.create(ctx, key, w, now)
			continue
		}
		s, err := specOf(h)
		if err == nil && s.Equal(w.Spec) && (p.nodeUID == "" || ownedBy(h, p.nodeUID)) {
			continue
		}
		p.update(ctx, key, w, h, now)
	}
	for key, h := range have {
		if _, ok := want[key]; ok || p.settling(key, h, now) {
			continue
		}
		p.delete(ctx, key, h, now)
	}
}

// settling reports whether key was written less than settle ago and the
// watch does not show that write yet.
func (p *Publisher) settling(key string, h *unstructured.Unstructured, now time.Time) bool {
	e, ok := p.expect[key]
	if !ok {
		return false
	}
	seen := (e.gone && h == nil) || (!e.gone && h != nil && h.GetResourceVersion() == e.rv)
	if seen || now.Sub(e.at) >= settle {
		delete(p.expect, key)
		return false
	}
	return true
}

func (p *Publisher) create(ctx context.Context, key string, w Record, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	node, err := p.client.Resource(nodesResource).Get(ctx, p.opts.Node, metav1.GetOptions{})
	if err != nil {
		p.fail("node", key, fmt.Errorf("read Node %s (the records' owner): %w", p.opts.Node, err))
		return
	}
	p.ok("node")
	p.nodeUID = node.GetUID()
	u, err := p.client.Resource(Resource).Namespace(w.Namespace).Create(ctx, w.object(p.nodeUID), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return // the watch has not shown it yet
	}
	p.wrote("create", key, w, u, err, now)
}

func (p *Publisher) update(ctx context.Context, key string, w Record, h *unstructured.Unstructured, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	uid := p.nodeUID
	if uid == "" && len(h.GetOwnerReferences()) == 1 {
		uid = h.GetOwnerReferences()[0].UID
	}
	o := w.object(uid)
	o.SetResourceVersion(h.GetResourceVersion())
	u, err := p.client.Resource(Resource).Namespace(w.Namespace).Update(ctx, o, metav1.UpdateOptions{})
	p.wrote("update", key, w, u, err, now)
}

func (p *Publisher) delete(ctx context.Context, key string, h *unstructured.Unstructured, now time.Time) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	uid := h.GetUID()
	err := p.client.Resource(Resource).Namespace(h.GetNamespace()).Delete(ctx, h.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		err = nil // gone already (its Node's deletion, an operator)
	} else if err == nil {
		p.writes.WithLabelValues("delete").Inc()
		s, _ := specOf(h)
		p.opts.Log.Info("placement record deleted", "record", key, "identity", h.GetNamespace()+"/"+s.Identity)
	}
	if err != nil {
		p.fail("delete", key, err)
		return
	}
	p.ok("delete")
	p.expect[key] = expectation{gone: true, at: now}
}

// wrote accounts for a create or an update.
func (p *Publisher) wrote(verb, key string, w Record, u *unstructured.Unstructured, err error, now time.Time) {
	if err != nil {
		p.fail(verb, key, err)
		return
	}
	p.ok(verb)
	p.writes.WithLabelValues(verb).Inc()
	p.expect[key] = expectation{rv: u.GetResourceVersion(), at: now}
	args := []any{"record", key, "identity", w.Namespace + "/" + w.Spec.Identity, "ips", w.Spec.IPs, "state", w.Spec.State}
	if !w.Spec.ExpiresAt.IsZero() {
		args = append(args, "expiresAt", w.Spec.ExpiresAt.UTC().Format(time.RFC3339))
	}
	p.opts.Log.Info("placement record "+verb+"d", args...)
}

// fail counts a failed step and logs it when it differs from the step's last
// logged failure (the API server being away fails every pass alike).
func (p *Publisher) fail(step, key string, err error) {
	p.errs.WithLabelValues(step).Inc()
	msg := err.Error()
	if step == "watch" && apierrors.IsNotFound(err) {
		msg = "the IPHold resource is not installed (kubectl apply -k deploy/placement): " + msg
	}
	p.mu.Lock()
	same := p.logged[step] == msg
	p.logged[step] = msg
	p.mu.Unlock()
	if same {
		p.opts.Log.Debug("placement step failed again", "step", step, "record", key, "err", msg)
		return
	}
	p.opts.Log.Warn("placement step failed; retried every interval", "step", step, "record", key, "err", msg)
}

// ok forgets a step's last failure, so the next one is logged.
func (p *Publisher) ok(step string) {
	p.mu.Lock()
	delete(p.logged, step)
	p.mu.Unlock()
}
