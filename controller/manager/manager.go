// Package manager is stickyip-controller's loop: it alone writes the
// placement index and the verdicts in the nodes' records.
//
//	informers (all replicas, always)         the leader's passes
//	  pods, StatefulSets, Nodes ── facts ─┐    ┌─ judge each changed record: its entries
//	  NodeRecords, index shards ──────────┼──► │  against the pods (claims), the
//	  handlers: tombstones, how sets went,│ q  │  StatefulSet retention (retention)
//	  which record follows which pod/set ─┘    ├─ each namespace whose claims changed:
//	                                           │  winners, packing, one merge patch a
//	                                           │  shard (index)
//	                                           └─ each judged record's status, written
//	                                              once if it changed; Events on refusals
//
// Changes are keys in one workqueue (a record, or a namespace). A pass
// takes the first key, waits BatchWindow for the ones that come with it,
// and handles them all: a burst of claims from many nodes is a handful of
// passes, each one status write per changed record and one write per
// changed shard. A replica that does not hold the Lease keeps its informers
// warm and writes nothing. Nothing lives only in memory: the verdicts are
// in the records' status, the index in the shards, so a new leader starts
// from them.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
)

// Clients are the controller's API clients.
type Clients struct {
	// Kube reaches pods, Nodes, StatefulSets, Leases, Events, the index's
	// shards (ConfigMaps) and the former index's.
	Kube kubernetes.Interface
	// Placement reaches NodeRecords.
	Placement *api.Client
}

// ErrLostLease is what Run returns when the replica stops holding the
// Lease: it stops writing, and the process ends to start over as a
// candidate with fresh caches.
var ErrLostLease = errors.New("stickyip-controller: lost the lease")

// Manager is the controller.
type Manager struct {
	cfg  Config
	kube kubernetes.Interface
	api  *api.Client
	log  *slog.Logger

	factory, shardFactory        informers.SharedInformerFactory
	pods, sets, nodes            cache.SharedIndexInformer
	records, shards              cache.SharedIndexInformer
	recordView                   *overlay[*placementv1.NodeRecord]
	shardView                    *overlay[*corev1.ConfigMap]
	queue                        workqueue.TypedRateLimitingInterface[key]
	seen                         *seen
	metrics                      *metrics
	events                       *eventer
	former                       *former
	st                           *state // the current term's; the pass goroutine's
	orphanMemo                   map[string]bool
	synced, leading, firstSynced atomic.Bool
	addr                         atomic.Value // the listener's address, once listening
}

// New returns a controller of cfg on clients; Run starts it.
func New(cfg Config, clients Clients, log *slog.Logger) (*Manager, error) {
	cfg = cfg.complete()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, kube: clients.Kube, api: clients.Placement, log: log,
		recordView: newOverlay[*placementv1.NodeRecord](), shardView: newOverlay[*corev1.ConfigMap](),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "stickyip-controller"}),
		seen: newSeen(), st: newState()}
	m.metrics = newMetrics()
	m.events = newEventer(clients.Kube, cfg.EventInterval)
	m.former = newFormer(clients.Kube, cfg.FormerTTL, log)
	if err := m.informers(); err != nil {
		return nil, err
	}
	return m, nil
}

// Run runs the controller until ctx ends (nil) or it loses the Lease
// (ErrLostLease): it serves /healthz, /readyz and /metrics, fills its
// caches, and writes only while it leads. A Manager runs once: a replica
// that lost the Lease starts over as a new process.
func (m *Manager) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", m.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("--listen-address: %w", err)
	}
	m.addr.Store(ln.Addr().String())
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer m.events.stop()
	m.factory.Start(ctx.Done())
	go m.records.RunWithContext(ctx)
	m.shardFactory.Start(ctx.Done())
	go m.prune(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), m.pods.HasSynced, m.sets.HasSynced, m.nodes.HasSynced,
		m.records.HasSynced, m.shards.HasSynced) {
		return nil
	}
	m.synced.Store(true)
	m.log.Info("caches synced", "pods", len(m.pods.GetStore().ListKeys()), "records", len(m.records.GetStore().ListKeys()))
	if !m.cfg.LeaderElect {
		m.lead(ctx)
		return nil
	}
	return m.elect(ctx)
}

// Addr returns the address /metrics is served on ("" before Run listens).
func (m *Manager) Addr() string {
	a, _ := m.addr.Load().(string)
	return a
}

// prune forgets old tombstones once a minute.
func (m *Manager) prune(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.seen.prune(now, m.cfg.TombstoneTTL)
		}
	}
}
