package ipam

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// segment is an inclusive address interval of one range, with the addresses
// never handed out (Engine.unassignables).
type segment struct {
	first, last netip.Addr
	skip        unassignableSet
}

func addr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// segments lists, in host-local's round-robin order, the intervals to search in
// range set i: from just after the last address handed out to the end of its
// range, the following ranges, and around again up to that last address.
func (e *Engine) segments(tx reservation.Txn, i int) ([]segment, error) {
	rs := e.rangeSets[i]
	lastStr, err := tx.Meta(metaLastReservedPre + strconv.Itoa(i))
	if err != nil {
		return nil, err
	}
	start, last := 0, netip.Addr{}
	if l, err := netip.ParseAddr(lastStr); err == nil && rs.Contains(net.IP(l.AsSlice())) {
		last = l
		for k := range rs {
			if rs[k].Contains(net.IP(l.AsSlice())) {
				start = k
				break
			}
		}
	}
	skip := e.unassignables()
	seg := func(k int) segment {
		r := rs[k]
		return segment{first: addr(r.RangeStart), last: addr(r.RangeEnd), skip: skip}
	}
	var out []segment
	if !last.IsValid() {
		for k := range rs {
			out = append(out, seg(k))
		}
		return out, nil
	}
	s := seg(start)
	if last.Less(s.last) {
		out = append(out, segment{first: last.Next(), last: s.last, skip: skip})
	}
	for j := 1; j < len(rs); j++ {
		out = append(out, seg((start+j)%len(rs)))
	}
	return append(out, segment{first: s.first, last: last, skip: skip}), nil
}

// firstFree returns the lowest address of seg that has no record, walking the
// store's sorted keys once instead of probing address by address.
func firstFree(tx reservation.Txn, seg segment) (netip.Addr, bool, error) {
	cand := seg.first
	skipUnassignable := func() {
		for cand.IsValid() && seg.skip.why(cand) != "" {
			cand = cand.Next()
		}
	}
	inSeg := func() bool { return cand.IsValid() && !seg.last.Less(cand) }
	skipUnassignable()
	err := tx.UsedFrom(seg.first, func(used netip.Addr) bool {
		if !inSeg() {
			return false
		}
		switch used.Compare(cand) {
		case -1: // an unassignable address, already skipped
			return true
		case 1: // a gap: cand is free
			return false
		}
		cand = cand.Next()
		skipUnassignable()
		return true
	})
	if err != nil || !inSeg() {
		return netip.Addr{}, false, err
	}
	return cand, true, nil
}

// searchFree looks for an address without any record in range set i.
func (e *Engine) searchFree(tx reservation.Txn, i int) (netip.Addr, bool, error) {
	segs, err := e.segments(tx, i)
	if err != nil {
		return netip.Addr{}, false, err
	}
	for _, s := range segs {
		if ip, ok, err := firstFree(tx, s); err != nil || ok {
			return ip, ok, err
		}
	}
	return netip.Addr{}, false, nil
}

// findFree returns an address for a new allocation in range set i: one with
// no record. When the range set has none it first releases allocations whose
// sandbox is gone; then takes the address that has cooled down longest
// (ReuseDelay is a preference, not a promise, when nothing else is free: the
// pod did not choose it); then gives up the reservation that a StatefulSet
// has kept longest past its own duration (Overdue), whatever the policy: a
// pod that exists needs an address more than a member that may never come
// back; then, under the evict policy, gives up a reservation chosen by
// evictionVictim. Unassignable addresses are never returned, whatever an
// earlier stickyip recorded on them.
func (e *Engine) findFree(tx reservation.Txn, i int, who reservation.Identity, now time.Time) (netip.Addr, error) {
	if ip, ok, err := e.searchFree(tx, i); err != nil || ok {
		return ip, err
	}
	rs := &e.rangeSets[i]
	inSet := func(r *reservation.Record) bool { return rs.Contains(net.IP(r.IP.AsSlice())) }
	if _, err := e.releaseDead(tx, now, "pool full, sandbox gone", inSet); err != nil {
		return netip.Addr{}, err
	}
	if ip, ok, err := e.searchFree(tx, i); err != nil || ok {
		return ip, err
	}
	never := e.unassignables()
	var cooled, overdue *reservation.Record
	var reserved []*reservation.Record // closest to expiry first
	err := tx.ByExpiry(func(r *reservation.Record) bool {
		switch {
		case !inSet(r), never.why(r.IP) != "":
		case r.State == reservation.Cooling:
			cooled = r // the first in expiry order was freed first
			return false
		case r.Identity.Same(who):
		case r.Overdue(now):
			if overdue == nil { // its duration ended first
				overdue = r
			}
		default:
			reserved = append(reserved, r)
		}
		return true
	})
	if err != nil {
		return netip.Addr{}, err
	}
	if cooled != nil {
		e.log().Info("pool full: handing out the address freed longest ago before its reuse delay ended", "ip", cooled.IP,
			"freedAt", cooled.ReleasedAt.UTC().Format(time.RFC3339), "lastPod", cooled.LastIdentity.Pod(), "forPod", who.Pod())
		return cooled.IP, tx.Delete(cooled.IP)
	}
	if overdue != nil {
		e.log().Warn("pool full: giving up a reservation its StatefulSet keeps past the pod's reservation duration", "ip", overdue.IP,
			"pod", overdue.Identity.Pod(), "ifname", overdue.Identity.IfName, "statefulSet", overdue.StatefulSet.Name,
			"durationEnded", overdue.ExpiresAt.UTC().Format(time.RFC3339), "forPod", who.Pod())
		return overdue.IP, tx.Delete(overdue.IP)
	}
	if len(reserved) == 0 || e.policy == PoolFullFail {
		why := "every address is allocated"
		if len(reserved) > 0 {
			why = fmt.Sprintf("%d addresses are reserved for deleted pods and ipam.reservation.poolFull is %q", len(reserved), e.policy)
		}
		return netip.Addr{}, fmt.Errorf("%w in range set %d (%s): %s", ErrPoolExhausted, i, rs.String(), why)
	}
	victim, rule := evictionVictim(reserved, who.Namespace)
	e.log().Warn("pool full: giving up a reservation", "ip", victim.IP, "pod", victim.Identity.Pod(),
		"ifname", victim.Identity.IfName, "expiresAt", victim.ExpiresAt.UTC().Format(time.RFC3339), "forPod", who.Pod(), "rule", rule)
	if err := tx.Delete(victim.IP); err != nil {
		return netip.Addr{}, err
	}
	return victim.IP, nil
}

// evictionVictim chooses the reservation a full range set gives up, from
// reserved (closest to expiry first, none of the requester's own identity):
// the requester's own namespace gives way first; only when it holds none,
// the namespace holding the most (ties: the one whose reservation is
// closest to expiry). Within the namespace, the reservation closest to
// expiry goes. So a namespace that parks reservations on a full node gives
// up its own before anyone else's, and cannot take another namespace's while
// it holds one.
func evictionVictim(reserved []*reservation.Record, namespace string) (*reservation.Record, string) {
	count := map[string]int{}
	for _, r := range reserved {
		count[r.Identity.Namespace]++
	}
	if count[namespace] > 0 && namespace != "" {
		i := slices.IndexFunc(reserved, func(r *reservation.Record) bool { return r.Identity.Namespace == namespace })
		return reserved[i], "the requesting pod's own namespace gives way first"
	}
	most := slices.Max(slices.Collect(maps.Values(count)))
	i := slices.IndexFunc(reserved, func(r *reservation.Record) bool { return count[r.Identity.Namespace] == most })
	return reserved[i], fmt.Sprintf("the requesting pod's namespace holds none here; namespace %s holds the most (%d)", reserved[i].Identity.Namespace, most)
}
