package placement

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// Watcher follows the node's own NodeRecord: one list and watch of that
// name, so the controller's verdicts in its status reach the node as they
// are written.
type Watcher struct {
	node     string
	informer cache.SharedIndexInformer
	log      *slog.Logger
	changed  chan struct{}

	mu        sync.Mutex
	refused   error  // the last answer that the API serves no records to this node (403, 404)
	refusedAt string // the watch's resourceVersion then: one listed since clears the refusal
	logged    string
}

// NewWatcher returns a watcher of node's record through client; call Run.
func NewWatcher(client *kube.REST, node string, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{node: node, log: log, changed: make(chan struct{}, 1)}
	w.informer = cache.NewSharedIndexInformer(client.ListWatchRecord(node), &placementv1.NodeRecord{}, 0, cache.Indexers{})
	_ = w.informer.SetTransform(func(o any) (any, error) {
		if r, ok := o.(*placementv1.NodeRecord); ok {
			r.ManagedFields = nil
		}
		return o, nil
	})
	_ = w.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { w.noteError(err) })
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify() },
		UpdateFunc: func(any, any) { w.notify() },
		DeleteFunc: func(any) { w.notify() },
	})
	return w
}

// notify says the record changed, without waiting: a change not taken yet
// already says so.
func (w *Watcher) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Changed receives a value when the record changed since it was last
// received (retention.Verdicts).
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Run runs the watch until ctx is done.
func (w *Watcher) Run(ctx context.Context) { w.informer.RunWithContext(ctx) }

// Record returns the record as last seen (nil: there is none) and whether
// the watch has listed it at least once.
func (w *Watcher) Record() (*placementv1.NodeRecord, bool) {
	if !w.informer.HasSynced() {
		return nil, false
	}
	o, ok, err := w.informer.GetStore().GetByKey(w.node)
	if err != nil || !ok {
		return nil, true
	}
	return o.(*placementv1.NodeRecord), true
}

// Served reports whether the API serves the node its record: known is
// false until it answered either way; ok is false after it refused (no
// custom resource definition, or no RBAC for nodes), until it serves it
// again.
func (w *Watcher) Served() (ok, known bool) {
	rv := w.informer.LastSyncResourceVersion()
	w.mu.Lock()
	if w.refused != nil && rv != w.refusedAt {
		w.refused, w.logged = nil, "" // listed since: served again
	}
	refused := w.refused
	w.mu.Unlock()
	if refused != nil {
		return false, true
	}
	if w.informer.HasSynced() {
		return true, true
	}
	return false, false
}

// noteError records what the list or watch was answered: a refusal that
// says the API serves no records to this node (403, 404) stops the
// following of StatefulSets; anything else (the API server away, a watch
// ended) changes nothing.
func (w *Watcher) noteError(err error) {
	var status apierrors.APIStatus
	if errors.Is(err, io.EOF) || !errors.As(err, &status) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		w.refused, w.refusedAt = err, w.informer.LastSyncResourceVersion()
	}
	if msg := err.Error(); msg != w.logged {
		w.logged = msg
		w.log.Warn("placement: the watch of this node's NodeRecord was refused (deploy/placement and its nodes' RBAC: docs/guides/placement.md)", "err", msg)
	}
}
