package placement

import (
	"net/netip"
	"slices"
	"time"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/reservation"
)

// Hold is one entry of a shard (package entry: its form and parser).
type Hold = entry.Hold

// Want is the entry a node means to have for an identity it holds.
type Want struct {
	Hold
	// Running reports whether a sandbox holds the addresses now (an
	// allocation, not only a reservation): only then may the node take the
	// identity over from another node's older claim.
	Running bool
}

// Key names an identity in a namespace.
type Key struct{ Namespace, Identity string }

// Desired returns the entries node should have, by identity: one per
// identity (namespace/name) holding, in any network and on any interface,
// an allocation with a reservation duration or a reservation that has not
// expired at now. Allocations without a duration, cooling addresses and
// anonymous records are not sticky. holds, when set, says which addresses
// the node holds now (in its network's ranges, in no pod CIDR the node no
// longer has): the others are never published (a node registered again
// with another podCIDR), and an identity left with none has no entry.
func Desired(node string, entries []reservation.Entry, now time.Time, holds func(reservation.Entry) bool) map[Key]Want {
	out := map[Key]Want{}
	for _, e := range entries {
		id := e.Identity
		if id.IsZero() {
			continue
		}
		switch {
		case e.State == reservation.Allocated && e.Duration > 0:
		case e.State == reservation.Reserved && !e.Expired(now):
		default:
			continue
		}
		if holds != nil && !holds(e) {
			continue
		}
		k := Key{id.Namespace, id.Name}
		h, seen := out[k]
		if !seen {
			h = Want{Hold: Hold{Node: node}}
		}
		h.IPs = append(h.IPs, e.IP.String())
		if !seen || e.AllocatedAt.After(h.Since) {
			h.Since = e.AllocatedAt
			h.Pod = e.PodName
		}
		if e.State == reservation.Allocated {
			h.Running = true
		}
		out[k] = h
	}
	for k, h := range out {
		if h.Pod == "" { // recorded by a stickyip before PodName: the name is the identity
			h.Pod = k.Identity
		}
		slices.SortFunc(h.IPs, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
		h.IPs = slices.Compact(h.IPs)
		out[k] = h
	}
	return out
}
