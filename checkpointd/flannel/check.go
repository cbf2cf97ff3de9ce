package flannel

import (
	"fmt"
	"slices"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// IPAMCheck returns the Keeper's Check that a saved lease still matches the
// IPAM, as view returns it (ipamstore.Store.Observe: read once per change):
// the address stickyip allocated last on the flannel networks (those
// networks returns: Networks) lies inside the lease's subnets, and none of
// the lease's subnets is in a pod CIDR the node no longer has. An IPAM that
// has allocated nothing there has nothing to contradict.
func IPAMCheck(view func() (*ipamstore.View, error), networks func(*ipamstore.View) []string) func(contract.FlannelLease) error {
	return func(l contract.FlannelLease) error {
		v, err := view()
		if err != nil {
			return fmt.Errorf("reading the IPAM store: %w", err)
		}
		nets := networks(v)
		var last *reservation.Entry
		for i := range v.Entries {
			e := &v.Entries[i]
			if slices.Contains(nets, e.Network) && (last == nil || e.AllocatedAt.After(last.AllocatedAt)) {
				last = e
			}
		}
		for _, p := range l.Subnets() {
			if v.Ranges.Retires(p.Addr()) {
				return fmt.Errorf("the lease's subnet %s is in a pod CIDR the node no longer has (%s)", p, v.Ranges)
			}
		}
		if last == nil || l.Contains(last.IP) {
			return nil
		}
		return fmt.Errorf("stickyip allocated %s on network %s last (%s), outside the lease's subnet %s: the lease is older than the IPAM's",
			last.IP, last.Network, last.AllocatedAt.UTC().Format("2006-01-02T15:04:05Z"), l)
	}
}
