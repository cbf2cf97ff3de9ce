package manager

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// batch returns the keys of the next pass: the first that comes, and all
// that come within BatchWindow after it. false: the term is over.
func (m *Manager) batch(ctx context.Context) ([]key, bool) {
	first, shutdown := m.queue.Get()
	if shutdown {
		return nil, false
	}
	keys := []key{first}
	select {
	case <-ctx.Done():
	case <-time.After(m.cfg.BatchWindow):
	}
	for m.queue.Len() > 0 {
		k, shutdown := m.queue.Get()
		if shutdown {
			break
		}
		keys = append(keys, k)
	}
	return keys, ctx.Err() == nil
}

// pass handles keys: it judges the records, brings the shards of every
// namespace they changed (or that changed) to the index, then writes each
// judged record's status. It returns the keys to try again.
func (m *Manager) pass(ctx context.Context, keys []key) map[key]bool {
	m.metrics.passes.Inc()
	start := time.Now()
	now := start
	m.orphanMemo = map[string]bool{}
	judged := map[string]*judgement{}
	dirty := map[string]bool{}
	for _, k := range keys {
		if k.namespace {
			dirty[k.name] = true
			continue
		}
		j, ns := m.judge(ctx, k.name, now)
		judged[k.name] = j
		maps.Copy(dirty, ns)
	}
	failed := map[key]bool{}
	for _, ns := range slices.Sorted(maps.Keys(dirty)) {
		nodes, err := m.syncNamespace(ctx, ns)
		if err != nil {
			m.log.Warn("index not written", "err", err)
			failed[namespaceKey(ns)] = true
			continue
		}
		for n := range nodes {
			if judged[n] != nil {
				continue
			}
			j, more := m.judge(ctx, n, now)
			judged[n] = j
			for ns2 := range more { // its claims changed since: the next pass
				m.enqueue(namespaceKey(ns2))
			}
		}
	}
	m.act(ctx, judged, failed, now)
	m.metrics.records.Set(float64(len(m.records.GetStore().ListKeys())))
	m.metrics.syncSeconds.Observe(time.Since(start).Seconds())
	return failed
}

// act writes what the judgements decided, Writers at a time: each
// record's status, or its deletion; and schedules the judgements to come.
func (m *Manager) act(ctx context.Context, judged map[string]*judgement, failed map[key]bool, now time.Time) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, m.cfg.Writers)
	for name, j := range judged {
		if !j.retry.IsZero() {
			m.queue.AddAfter(recordKey(name), j.retry.Sub(now))
		}
		if j.status == nil && !j.remove {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			var err error
			if j.remove {
				err = m.removeRecord(ctx, j)
			} else {
				err = m.writeStatus(ctx, j, now)
			}
			if err != nil {
				m.log.Warn("record not written", "record", name, "err", err)
				mu.Lock()
				failed[recordKey(name)] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// removeRecord deletes the record of a Node gone NodeGrace (if it is still
// the record judged).
func (m *Manager) removeRecord(ctx context.Context, j *judgement) error {
	err := m.api.DeleteRecord(ctx, j.name, j.record.UID)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	m.recordView.deleted(j.name, j.record.UID)
	m.log.Info("record deleted: its Node is gone", "record", j.name, "grace", m.cfg.NodeGrace)
	return nil
}
