package reconcile

import (
	"github.com/stickyip/stickyip/reservation"

	"github.com/stickyip/stickyip/contract"

	"fmt"
	"slices"

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

// LeaseCheck returns the flannel.Keeper check that a saved lease still
// matches the IPAM: the address stickyip allocated last on the flannel
// networks (those networks returns) lies inside the lease's subnets. An
// IPAM that has allocated nothing there has nothing to contradict.
func LeaseCheck(ipam IPAM, networks func() ([]string, error)) func(contract.FlannelLease) error {
	return func(l contract.FlannelLease) error {
		nets, err := networks()
		if err != nil {
			return fmt.Errorf("finding the flannel networks: %w", err)
		}
		entries, err := ipam.Entries()
		if err != nil {
			return fmt.Errorf("reading the IPAM store: %w", err)
		}
		var last *reservation.Entry
		for i := range entries {
			e := &entries[i]
			if slices.Contains(nets, e.Network) && (last == nil || e.AllocatedAt.After(last.AllocatedAt)) {
				last = e
			}
		}
		if rk, ok := ipam.(RangeKeeper); ok {
			n, err := rk.NodeRanges()
			if err != nil {
				return fmt.Errorf("reading the node's pod ranges: %w", err)
			}
			for _, p := range l.Subnets() {
				if n.Retires(p.Addr()) {
					return fmt.Errorf("the lease's subnet %s is in a pod CIDR the node no longer has (%s)", p, n)
				}
			}
		}
		if last == nil || l.Contains(last.IP) {
			return nil
		}
		return fmt.Errorf("stickyip allocated %s on network %s last (%s), outside the lease's subnet %s: the lease is older than the IPAM's",
			last.IP, last.Network, last.AllocatedAt.UTC().Format("2006-01-02T15:04:05Z"), l)
	}
}
