package reconcile

import (
	"fmt"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/reservation"
)

// reconcileIPAM handles allocations whose sandbox no longer exists as CNI
// DEL (the DEL never came) and sets the IPAM gauges. An allocation is a leak
// only when it is older than LeakMinAge (a sandbox being created is not
// listed while its ADD runs) and its sandbox was missing in two passes in a
// row. The runtime's list is the whole truth: a sandbox the runtime knows, in
// any state, is not a leak.
func (r *Reconciler) reconcileIPAM(s *snapshot) {
	if r.cfg.IPAM == nil {
		return
	}
	entries, err := r.cfg.IPAM.Entries()
	if err != nil {
		r.problem(checkpoint.ID{}, "ipam", "cannot read the IPAM store", err)
		return
	}
	r.solved(checkpoint.ID{}, "ipam")
	exists := map[string]bool{}
	for _, sb := range s.sandboxes {
		exists[sb.ID] = true
	}
	allocated, reserved := map[string]int{}, map[string]int{}
	missing := map[string]bool{}
	for _, e := range entries {
		if e.State == reservation.Reserved {
			reserved[e.Network]++
			continue
		}
		allocated[e.Network]++
		if e.ContainerID == "" || exists[e.ContainerID] || s.now.Sub(e.AllocatedAt) < r.cfg.LeakMinAge {
			continue
		}
		key := e.Network + "\x00" + e.ContainerID + "\x00" + e.IfName
		missing[key] = true
		if !r.wasMissing[key] {
			continue // first pass it is missing: wait for the next
		}
		if err := r.cfg.IPAM.ReleaseContainer(e.Network, e.ContainerID, e.IfName); err != nil {
			r.problem(checkpoint.ID{}, "ipam-leak", fmt.Sprintf("cannot release leaked allocation %s (%s)", e.IP, e.ContainerID), err)
			continue
		}
		delete(missing, key)
		r.cfg.Metrics.ReconciledLeaks.Inc()
		r.cfg.Log.Info("allocation without sandbox handled as DEL", "network", e.Network, "ip", e.IP,
			"containerID", e.ContainerID, "pod", e.Identity.Pod())
	}
	r.wasMissing = missing

	m := r.cfg.Metrics
	m.Allocations.Reset()
	m.Reservations.Reset()
	for n, c := range allocated {
		m.Allocations.WithLabelValues(n).Set(float64(c))
	}
	for n, c := range reserved {
		m.Reservations.WithLabelValues(n).Set(float64(c))
	}
	if fc, ok := r.cfg.IPAM.(FreeCounter); ok {
		if free, err := fc.Free(); err == nil {
			m.FreeIPs.Reset()
			for n, c := range free {
				m.FreeIPs.WithLabelValues(n).Set(float64(c))
			}
		}
	}
}
