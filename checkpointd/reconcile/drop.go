package reconcile

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

// dropCheckpoint deletes id's checkpoint (secret data included) and its
// absence mark: the API server has said for the grace period that the
// parent is gone. The parent's IP reservation is left alone: it expires
// after the pod's own reserved-ip-duration, as for any deleted pod.
func (r *Reconciler) dropCheckpoint(s *snapshot, id checkpoint.ID) {
	if err := r.cfg.Store.Remove(id); err != nil {
		r.problem(id, "release", "cannot remove the checkpoint", err)
		return
	}
	if err := r.cfg.Store.ClearAbsent(id); err != nil {
		r.problem(id, "release", "cannot remove the parent's absence mark", err)
		return
	}
	r.solved(id, "release")
	rec := s.records[id]
	delete(s.records, id)
	r.mem(id).captured, r.mem(id).capturedRV = time.Time{}, ""
	r.cfg.Metrics.ReleasesTotal.Inc()
	const why = "the API server has reported the parent gone for the grace period"
	r.cfg.Log.Info("checkpoint released (the IP reservation keeps its own duration): "+why, "pod", id.String())
	if rec != nil {
		r.event(s, rec.Pod, corev1.EventTypeNormal, EventReleased, "checkpointd on node %s deleted this pod's checkpoint: %s", r.cfg.Node, why)
	}
}
