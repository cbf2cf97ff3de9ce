package reconcile

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/reservation"
)

// reconcileIPAM handles allocations whose sandbox no longer exists as CNI
// DEL (the DEL never came) and sets the IPAM gauges. An allocation is a leak
// only when it is older than LeakMinAge (a sandbox being created is not
// listed while its ADD runs) and its sandbox was missing in two passes in a
// row. A sandbox the runtime knows, in any state, is not a leak; one it does
// not know is released only if the IPAM engine finds it gone (previous boot,
// network namespace missing): another runtime or cnitool may own it.
func (r *Reconciler) reconcileIPAM(s *snapshot) {
	if r.cfg.IPAM == nil {
		return
	}
	if s.ipamErr != nil {
		r.problem(checkpoint.ID{}, "ipam", "cannot read the IPAM store", s.ipamErr)
		if r.cfg.Repair != nil {
			r.cfg.Repair.Suspect(s.ipamErr)
		}
		return
	}
	r.solved(checkpoint.ID{}, "ipam")
	entries := s.ipam.Entries
	exists := map[string]bool{}
	for _, sb := range s.sandboxes {
		exists[sb.ID] = true
	}
	missing := map[string]bool{}
	for _, e := range entries {
		if e.State != reservation.Allocated {
			continue
		}
		if e.ContainerID == "" || exists[e.ContainerID] || s.now.Sub(e.AllocatedAt) < r.cfg.LeakMinAge {
			continue
		}
		key := e.Network + "\x00" + e.ContainerID + "\x00" + e.IfName
		missing[key] = true
		if !r.wasMissing[key] {
			continue // first pass it is missing: wait for the next
		}
		released, err := r.cfg.IPAM.ReleaseIn(s.ipam, e.Network, e.ContainerID, e.IfName)
		if err != nil {
			r.problem(checkpoint.ID{}, "ipam-leak", fmt.Sprintf("cannot release leaked allocation %s (%s)", e.IP, e.ContainerID), err)
			continue
		}
		if !released {
			continue // its network namespace is still there: another runtime's, or in doubt
		}
		delete(missing, key)
		r.cfg.Metrics.ReconciledLeaks.Inc()
		r.cfg.Log.Info("allocation without sandbox handled as DEL", "network", e.Network, "ip", e.IP,
			"containerID", e.ContainerID, "pod", e.Identity.Pod())
	}
	r.wasMissing = missing

	r.setPoolGauges(s.ipam)
}

// setPoolGauges exports each network's totals as `stickyip status` prints
// them (one source: the engine's Summary over the CNI configs' ranges). When
// they cannot be read the gauges keep their last values; the failure is a
// problem of the pass like any other.
func (r *Reconciler) setPoolGauges(v *ipamstore.View) {
	if v.ConfErr != nil {
		r.problem(checkpoint.ID{}, "ipam-pools", "cannot count the IPAM pools", v.ConfErr)
		return
	}
	r.solved(checkpoint.ID{}, "ipam-pools")
	m := r.cfg.Metrics
	for _, g := range []*prometheus.GaugeVec{m.Allocations, m.Reservations, m.Cooling, m.FreeIPs} {
		g.Reset()
	}
	for n, p := range v.Pools {
		m.Allocations.WithLabelValues(n).Set(float64(p.Allocated))
		m.Reservations.WithLabelValues(n).Set(float64(p.Reserved))
		m.Cooling.WithLabelValues(n).Set(float64(p.Cooling))
		m.FreeIPs.WithLabelValues(n).Set(float64(p.Free))
	}
}
