package reconcile

import (
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

// pruneCorrupt deletes corrupt checkpoints set aside longer than
// CorruptRetention (they are evidence for the operator, not data).
func (r *Reconciler) pruneCorrupt(now time.Time) {
	if r.cfg.CorruptRetention <= 0 {
		return
	}
	n, err := r.cfg.Store.PruneCorrupt(r.cfg.CorruptRetention, now)
	if err != nil {
		r.problem(checkpoint.ID{}, "prune", "cannot prune old corrupt checkpoints", err)
		return
	}
	r.solved(checkpoint.ID{}, "prune")
	if n > 0 {
		r.cfg.Log.Info("corrupt checkpoints older than the retention deleted", "count", n, "retention", r.cfg.CorruptRetention.String())
	}
}

// gauges sets the gauges from the snapshot, after this pass's actions.
func (r *Reconciler) gauges(s *snapshot) {
	m := r.cfg.Metrics
	m.Checkpoints.Set(float64(len(s.records)))
	m.RestoresActive.Set(float64(len(s.copies)))
	up := 0.0
	if s.api.Up() {
		up = 1
	}
	m.APIReachable.Set(up)
}
