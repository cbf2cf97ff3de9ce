package ipam

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/stickyip/stickyip/reservation"
)

// Check verifies that the container holds the addresses of its previous result
// that belong to this network's ranges.
func (e *Engine) Check(tx reservation.Txn, containerID, ifname string, prev []netip.Addr) error {
	recs, err := tx.ByContainer(containerID, ifname)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%w: container %s interface %s", ErrNoAllocation, containerID, ifname)
	}
	for _, ip := range prev {
		inRange := slices.ContainsFunc(e.rangeSets, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) })
		if !inRange {
			continue
		}
		if !slices.ContainsFunc(recs, func(r *reservation.Record) bool { return r.IP == ip }) {
			return fmt.Errorf("%w: %s from the previous result is not recorded for container %s", ErrNoAllocation, ip, containerID)
		}
	}
	return nil
}
