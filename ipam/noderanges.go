package ipam

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// metaNodeRanges keeps the node's pod ranges in every network's bookkeeping.
const metaNodeRanges = "nodeRanges"

// NodeRanges is what the node's Node object said of its pod ranges
// (spec.podCIDRs), as checkpointd, which watches the Node, records it. A
// node deleted and registered again (cloud VMs are) may get another
// podCIDR; flannel's lease (subnet.env), from which the CNI chain takes the
// network's range, changes only when flanneld restarts. Until then the
// network's configured range lies in a retired range: no address of it is
// handed out, reserved or kept.
type NodeRanges struct {
	// Current are the Node's pod CIDRs as last seen.
	Current []netip.Prefix `json:"current"`
	// Retired are the pod CIDRs the Node had before and has no longer.
	Retired []netip.Prefix `json:"retired,omitempty"`
	// Changed is when Current last changed (zero: never since recorded).
	Changed time.Time `json:"changed,omitzero"`
}

// Retires reports whether ip is in a retired range and in no current one.
func (n NodeRanges) Retires(ip netip.Addr) bool {
	in := func(ps []netip.Prefix) bool {
		return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
	}
	return in(n.Retired) && !in(n.Current)
}

// next returns the ranges once the Node says current: a range no longer
// current is retired, a retired range current again is not.
func (n NodeRanges) next(current []netip.Prefix, now time.Time) NodeRanges {
	out := NodeRanges{Current: slices.Clone(current), Changed: n.Changed}
	for _, p := range n.Retired {
		if !slices.Contains(current, p) {
			out.Retired = append(out.Retired, p)
		}
	}
	for _, p := range n.Current {
		if !slices.Contains(current, p) && !slices.Contains(out.Retired, p) {
			out.Retired = append(out.Retired, p)
		}
	}
	if len(n.Current) > 0 && !samePrefixes(n.Current, current) {
		out.Changed = now
	}
	return out
}

func samePrefixes(a, b []netip.Prefix) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y netip.Prefix) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// String describes n for messages.
func (n NodeRanges) String() string {
	s := fmt.Sprintf("pod CIDRs %v", n.Current)
	if len(n.Retired) > 0 {
		s += fmt.Sprintf(", no longer %v", n.Retired)
	}
	if !n.Changed.IsZero() {
		s += " (changed " + n.Changed.UTC().Format(time.RFC3339) + ")"
	}
	return s
}

// ReadNodeRanges returns the node ranges recorded in the network's
// bookkeeping; the zero value when none are.
func ReadNodeRanges(tx reservation.Txn) (NodeRanges, error) {
	var n NodeRanges
	v, err := tx.Meta(metaNodeRanges)
	if err != nil || v == "" {
		return n, err
	}
	if err := json.Unmarshal([]byte(v), &n); err != nil {
		return NodeRanges{}, fmt.Errorf("%w: bookkeeping %s: %v", reservation.ErrCorrupt, metaNodeRanges, err)
	}
	return n, nil
}

// SetNodeRanges records that the Node's pod CIDRs are current, and drops
// what a retired range held: reservations and cooling addresses in it
// (their pod could never get them back: the range is no longer the node's,
// and may be another node's by now). Allocations of running pods stay until
// their DEL, which frees them. It returns the ranges recorded and the
// records dropped, each logged.
func (e *Engine) SetNodeRanges(tx reservation.Txn, current []netip.Prefix) (NodeRanges, []*reservation.Record, error) {
	if len(current) == 0 {
		return NodeRanges{}, nil, fmt.Errorf("%w: no pod CIDR", ErrInvalidArgs)
	}
	old, err := ReadNodeRanges(tx)
	if err != nil {
		return old, nil, err
	}
	now := e.now()
	n := old.next(current, now)
	if samePrefixes(n.Current, old.Current) && samePrefixes(n.Retired, old.Retired) {
		return old, nil, reservation.ErrNoChange
	}
	v, err := json.Marshal(n)
	if err != nil {
		return old, nil, err
	}
	if err := tx.SetMeta(metaNodeRanges, string(v)); err != nil {
		return old, nil, err
	}
	dropped, err := collect(tx, func(r *reservation.Record) bool { return r.State != reservation.Allocated && n.Retires(r.IP) })
	if err != nil {
		return n, nil, err
	}
	for _, r := range dropped {
		e.log().Warn("dropping an address of a pod CIDR the node no longer has", "ip", r.IP, "state", r.State,
			"pod", r.Identity.Pod(), "lastPod", r.LastIdentity.Pod(), "nodeRanges", n.String())
		if err := tx.Delete(r.IP); err != nil {
			return n, nil, err
		}
	}
	e.log().Info("node pod ranges recorded", "nodeRanges", n.String(), "dropped", len(dropped))
	return n, dropped, nil
}

// retiredRange returns the first of the network's ranges that lies in a
// range the node no longer has, nil when none does.
func (e *Engine) retiredRange(n NodeRanges) *Range {
	for i := range e.rangeSets {
		for j := range e.rangeSets[i] {
			r := &e.rangeSets[i][j]
			if ip, ok := netip.AddrFromSlice(r.RangeStart); ok && n.Retires(ip.Unmap()) {
				return r
			}
		}
	}
	return nil
}

// refuseRetired fails an ADD whose network's range lies in a retired range:
// the lease it was configured from is older than the Node (flanneld writes
// the new one when it restarts); the runtime tries again.
func (e *Engine) refuseRetired(tx reservation.Txn) error {
	n, err := ReadNodeRanges(tx)
	if err != nil || len(n.Retired) == 0 {
		return err
	}
	if r := e.retiredRange(n); r != nil {
		return fmt.Errorf("%w: the network's range %s (subnet %s) is in a pod CIDR the node no longer has (%s); "+
			"the network's configuration predates the node's new pod CIDR (with flannel: flanneld writes the new lease to "+
			"/run/flannel/subnet.env when it restarts)", ErrRangeRetired, r, (*net.IPNet)(&r.Subnet), n)
	}
	return nil
}

// NodeHolds reports whether ip is an address the node holds now: in one of
// the network's ranges and in no pod CIDR the node no longer has. Only such
// an address is worth a placement record.
func (e *Engine) NodeHolds(n NodeRanges, ip netip.Addr) bool {
	if n.Retires(ip) {
		return false
	}
	return slices.ContainsFunc(e.rangeSets, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) })
}
