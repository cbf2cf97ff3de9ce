package reconcile

import (
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// keepLease runs the flannel lease keeper (see package flannel): the saved
// lease is put back only in the situation restores happen in, the API server
// unreachable for the grace period.
func (r *Reconciler) keepLease(s *snapshot) {
	if r.cfg.Lease == nil {
		return
	}
	out, err := r.cfg.Lease.Step(s.api == state.APIUnreachableForGrace)
	switch {
	case err != nil:
		r.cfg.Metrics.LeaseErrors.Inc()
		r.problem(checkpoint.ID{}, "flannel-lease", "flannel subnet lease", err)
		return
	case out == flannel.Restored:
		r.cfg.Metrics.LeaseRestores.Inc()
	}
	r.solved(checkpoint.ID{}, "flannel-lease")
}
