package ipam

import (
	"math"
	"math/big"
	"net"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// SetSummary is how full one range set is.
type SetSummary struct {
	RangeSet int    `json:"rangeSet"`
	Ranges   string `json:"ranges"`
	// Size counts the addresses the range set hands out (gateways excluded).
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
	sets = make([]SetSummary, len(e.rangeSets))
	for i := range e.rangeSets {
		sets[i] = SetSummary{RangeSet: i, Ranges: e.rangeSets[i].String(), Size: setSize(e.rangeSets[i])}
	}
	err = tx.ForEach(func(r *reservation.Record) error {
		i := e.setOf(r)
		if i < 0 {
			outside++
			return nil
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
		return nil
	})
	for i := range sets {
		sets[i].Free = max(sets[i].Size-sets[i].Allocated-sets[i].Reserved-sets[i].Cooling, 0)
	}
	return sets, outside, err
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

func (e *Engine) setOf(r *reservation.Record) int {
	for i := range e.rangeSets {
		if rng := e.rangeSets[i].RangeFor(net.IP(r.IP.AsSlice())); rng != nil && !rng.Gateway.Equal(net.IP(r.IP.AsSlice())) {
			return i
		}
	}
	return -1
}

// setSize counts the addresses a range set hands out: each range from start
// to end, minus its gateway when inside (capped at MaxInt32 for IPv6).
func setSize(rs RangeSet) int {
	total := new(big.Int)
	for _, r := range rs {
		n := new(big.Int).Sub(new(big.Int).SetBytes(r.RangeEnd.To16()), new(big.Int).SetBytes(r.RangeStart.To16()))
		n.Add(n, big.NewInt(1))
		if r.Gateway != nil && r.Contains(r.Gateway) {
			n.Sub(n, big.NewInt(1))
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
