package manager

import (
	"context"
	"errors"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// lead runs the passes of one term until ctx ends: it starts from the
// informers (the records' status and the shards hold everything), judges
// every record and syncs every namespace first, and is ready once that
// first pass is done.
func (m *Manager) lead(ctx context.Context) {
	m.log.Info("leading: writing the placement index")
	m.leading.Store(true)
	m.metrics.leader.Set(1)
	defer func() {
		m.leading.Store(false)
		m.metrics.leader.Set(0)
	}()
	m.st = newState()
	m.recordView.reset()
	m.shardView.reset()
	for _, name := range m.records.GetStore().ListKeys() {
		m.enqueue(recordKey(name))
	}
	for _, obj := range m.shards.GetStore().List() {
		if a, err := metaOf(obj); err == nil {
			m.enqueue(namespaceKey(a.GetNamespace()))
		}
	}
	if m.queue.Len() == 0 {
		// Nothing to judge or write: the index is what it should be.
		m.firstSynced.Store(true)
		m.log.Info("first index sync done", "keys", 0)
	}
	stop := context.AfterFunc(ctx, m.queue.ShutDown)
	defer stop()
	for first := true; ; first = false {
		keys, ok := m.batch(ctx)
		if !ok {
			for _, k := range keys {
				m.queue.Done(k)
			}
			return
		}
		failed := m.pass(ctx, keys)
		for _, k := range keys {
			if !failed[k] {
				m.queue.Forget(k)
			}
			m.queue.Done(k)
		}
		for k := range failed { // also the records a pass judged of its own accord
			m.queue.AddRateLimited(k)
		}
		if first {
			m.firstSynced.Store(true)
			m.log.Info("first index sync done", "keys", len(keys))
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	if o, ok := obj.(metav1.Object); ok {
		return o, nil
	}
	return nil, errors.New("not an object")
}

// elect runs for the Lease and leads while holding it; it returns nil when
// ctx ends, ErrLostLease when the Lease is lost, in both cases only once
// the term's passes are over.
func (m *Manager) elect(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: m.cfg.LeaderElectionNamespace, Name: m.cfg.LeaseName},
		Client:     m.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Identity},
	}
	// The elector starts the term in a goroutine of its own and cancels its
	// context before Run returns: a term not started by then never starts,
	// one started is waited for.
	var mu sync.Mutex
	var term chan struct{}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: m.cfg.LeaseName, ReleaseOnCancel: true,
		LeaseDuration: m.cfg.LeaseDuration, RenewDeadline: m.cfg.RenewDeadline, RetryPeriod: m.cfg.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if ctx.Err() != nil {
					mu.Unlock()
					return
				}
				done := make(chan struct{})
				term = done
				mu.Unlock()
				defer close(done)
				m.lead(ctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(id string) {
				if id != m.cfg.Identity {
					m.log.Info("following", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	mu.Lock()
	done := term
	mu.Unlock()
	if done != nil {
		<-done
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrLostLease
}
