package ipam

import (
	"math"
	"math/big"
	"net"
	"net/netip"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// SetSummary is how full one range set is.
type SetSummary struct {
	RangeSet int    `json:"rangeSet"`
	Ranges   string `json:"ranges"`
	// Size counts the addresses the range set hands out (gateways, network
	// and broadcast addresses excluded).
	Size int `json:"size"`
	// Allocated: held by sandboxes; Reserved: kept for deleted pods;
	// Cooling: freed less than reservation.reuseDelay ago; Free: the rest.
	Allocated int `json:"allocated"`
	Reserved  int `json:"reserved"`
	Cooling   int `json:"cooling"`
	Free      int `json:"free"`
}

// Summary counts, per range set, the addresses allocated, reserved, cooling
// down and free at now. Reservations and cooling periods past their expiry
// count as free (the next ADD drops them). It reads every record once;
// records outside every range set (the ranges changed) are returned in
// outside.
func (e *Engine) Summary(tx reservation.Txn, now time.Time) (sets []SetSummary, outside int, err error) {
	var recs []*reservation.Record
	err = tx.ForEach(func(r *reservation.Record) error {
		recs = append(recs, r)
		return nil
	})
	sets, outside = e.SummaryOf(recs, now)
	return sets, outside, err
}

// SummaryOf is Summary of the records recs, already read (a daemon reads
// them once per pass for every question it asks).
func (e *Engine) SummaryOf(recs []*reservation.Record, now time.Time) (sets []SetSummary, outside int) {
	never := e.unassignables()
	sets = make([]SetSummary, len(e.rangeSets))
	for i := range e.rangeSets {
		sets[i] = SetSummary{RangeSet: i, Ranges: e.rangeSets[i].String(), Size: setSize(e.rangeSets[i], never)}
	}
	for _, r := range recs {
		i := e.setOf(r, never)
		if i < 0 {
			outside++
			continue
		}
		switch {
		case r.Expired(now):
		case r.State == reservation.Allocated:
			sets[i].Allocated++
		case r.State == reservation.Reserved:
			sets[i].Reserved++
		case r.State == reservation.Cooling:
			sets[i].Cooling++
		}
	}
	for i := range sets {
		sets[i].Free = max(sets[i].Size-sets[i].Allocated-sets[i].Reserved-sets[i].Cooling, 0)
	}
	return sets, outside
}

// PoolTotals adds up a network's range sets (the figures checkpointd
// exports per network).
type PoolTotals struct {
	Size, Allocated, Reserved, Cooling, Free int
	// Outside counts records in no range set (see Summary).
	Outside int
}

// Totals adds up sets; outside is Summary's count of records in no range set.
func Totals(sets []SetSummary, outside int) PoolTotals {
	t := PoolTotals{Outside: outside}
	for _, s := range sets {
		t.Size += s.Size
		t.Allocated += s.Allocated
		t.Reserved += s.Reserved
		t.Cooling += s.Cooling
		t.Free += s.Free
	}
	return t
}

// setOf returns the range set a record's address is handed out from, or -1
// (outside every range set, or an unassignable address).
func (e *Engine) setOf(r *reservation.Record, never unassignableSet) int {
	if never.why(r.IP) != "" {
		return -1
	}
	for i := range e.rangeSets {
		if e.rangeSets[i].Contains(net.IP(r.IP.AsSlice())) {
			return i
		}
	}
	return -1
}

// setSize counts the addresses a range set hands out: each range from start
// to end, minus the unassignable addresses inside it (capped at MaxInt32 for
// IPv6).
func setSize(rs RangeSet, never unassignableSet) int {
	total := new(big.Int)
	for _, r := range rs {
		n := new(big.Int).Sub(new(big.Int).SetBytes(r.RangeEnd.To16()), new(big.Int).SetBytes(r.RangeStart.To16()))
		n.Add(n, big.NewInt(1))
		seen := map[netip.Addr]bool{}
		for _, u := range never {
			if !seen[u.ip] && r.Contains(net.IP(u.ip.AsSlice())) {
				seen[u.ip] = true
				n.Sub(n, big.NewInt(1))
			}
		}
		if n.Sign() > 0 {
			total.Add(total, n)
		}
	}
	if !total.IsInt64() || total.Int64() > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(total.Int64())
}
