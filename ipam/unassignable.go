package ipam

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/stickyip/stickyip/reservation"
)

// unassignable is an address of the network that no pod ever gets, and why.
type unassignable struct {
	ip  netip.Addr
	why string
}

// unassignableSet is every unassignable address of a network.
type unassignableSet []unassignable

// why says why ip is unassignable, or "" when it is not.
func (s unassignableSet) why(ip netip.Addr) string {
	for _, u := range s {
		if u.ip == ip {
			return u.why
		}
	}
	return ""
}

// unassignables lists, for every range of the network, its gateway, its
// subnet's network address and, for IPv4, its subnet's broadcast address.
// host-local refuses a requested gateway and keeps the network and broadcast
// addresses out by its rangeStart/rangeEnd defaults; stickyip refuses all
// three from every source and in every path, whatever rangeStart and
// rangeEnd say. IPv6 has no broadcast address: a subnet's last address is an
// ordinary one (host-local's default rangeEnd includes it), while its first,
// the subnet-router anycast address (RFC 4291), belongs to the router.
func (e *Engine) unassignables() unassignableSet {
	var out unassignableSet
	for _, rs := range e.rangeSets {
		for k := range rs {
			r := &rs[k]
			sub := (*net.IPNet)(&r.Subnet).String()
			if gw := addr(r.Gateway); gw.IsValid() {
				out = append(out, unassignable{gw, "the gateway of subnet " + sub})
			}
			out = append(out, unassignable{addr(r.Subnet.IP), "the network address of subnet " + sub})
			if len(r.Subnet.IP) == net.IPv4len {
				out = append(out, unassignable{addr(broadcastAddr(r.Subnet)), "the broadcast address of subnet " + sub})
			}
		}
	}
	return out
}

// UnassignableRecords describes every record of the network that sits on an
// unassignable address, and what becomes of it: a store written by a
// stickyip that granted a requested gateway may hold one. `stickyip check`
// reports them.
func (e *Engine) UnassignableRecords(tx reservation.Txn) ([]string, error) {
	never := e.unassignables()
	var out []string
	err := tx.ForEach(func(r *reservation.Record) error {
		why := never.why(r.IP)
		if why == "" {
			return nil
		}
		var fate string
		switch r.State {
		case reservation.Allocated:
			fate = "delete that pod: its DEL drops the record, and the address is never handed out again"
		case reservation.Reserved:
			fate = fmt.Sprintf("`stickyip release %s` drops it; it is never handed out, and is dropped when the pod returns", r.Identity.Pod())
		default:
			fate = "it is never handed out, and is dropped when its delay ends"
		}
		out = append(out, fmt.Sprintf("%s is %s but %s (recorded by an earlier stickyip): %s", r.IP, why, holderPhrase(r), fate))
		return nil
	})
	return out, err
}
