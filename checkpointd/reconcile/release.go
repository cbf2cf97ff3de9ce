package reconcile

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// dropCheckpoint deletes id's checkpoint (secret data included) and its
// absence mark: the parent is gone for good, or the policy refuses it. The
// parent's IP reservation is left alone: it expires after the pod's own
// reserved-ip-duration, as for any deleted pod.
func (r *Reconciler) dropCheckpoint(s *snapshot, id checkpoint.ID, in state.Input, v policy.Verdict) {
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
	delete(r.captured, id)
	delete(r.absentSince, id)
	delete(r.said, id)
	r.cfg.Metrics.ReleasesTotal.Inc()
	why := "the API server has reported the parent gone for the grace period"
	if !v.Allowed {
		why = "the node's policy refuses it: " + v.Detail
	}
	r.cfg.Log.Info("checkpoint released (the IP reservation keeps its own duration): "+why, "pod", id.String())
	if p := s.parents[id]; p != nil {
		r.event(s, p, corev1.EventTypeNormal, EventReleased, "checkpointd on node %s deleted this pod's checkpoint: %s", r.cfg.Node, why)
	} else if rec != nil && in.API == state.APIReachable {
		r.event(s, rec.Pod, corev1.EventTypeNormal, EventReleased, "checkpointd on node %s deleted this pod's checkpoint: %s", r.cfg.Node, why)
	}
}
