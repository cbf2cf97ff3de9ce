package metrics

import (
	"fmt"
	"math"
	"sort"
	"sync"
)

// Histogram counts observations in buckets of upper bounds (each bucket
// exposed cumulatively, as the text format wants, up to +Inf), with their
// sum and count.
type Histogram struct {
	desc
	bounds []float64 // ascending upper bounds, +Inf not included

	mu     sync.Mutex
	counts []uint64 // observations per bucket (not cumulative); the last is above every bound
	sum    float64
}

// NewHistogram returns a histogram named name with the given ascending
// upper bounds.
func NewHistogram(name, help string, bounds []float64) *Histogram {
	for i, b := range bounds {
		if math.IsNaN(b) || (i > 0 && b <= bounds[i-1]) {
			panic(fmt.Sprintf("metrics: histogram %s: bounds %v not strictly ascending", name, bounds))
		}
	}
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], 1) {
		bounds = bounds[:n-1] // +Inf is always there
	}
	return &Histogram{desc: newDesc(name, help), bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// ExponentialBuckets returns n upper bounds: start, start*factor,
// start*factor², ...
func ExponentialBuckets(start, factor float64, n int) []float64 {
	if n < 1 || start <= 0 || factor <= 1 {
		panic(fmt.Sprintf("metrics: ExponentialBuckets(%v, %v, %d): want n ≥ 1, start > 0, factor > 1", start, factor, n))
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}

// Observe adds one observation of v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // the first bound ≥ v: v counts as "le" that bound
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

// Count returns the number of observations (for tests).
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n uint64
	for _, c := range h.counts {
		n += c
	}
	return n
}

func (h *Histogram) collect(add func(family)) {
	h.mu.Lock()
	counts, sum := append([]uint64(nil), h.counts...), h.sum
	h.mu.Unlock()
	samples := make([]sample, 0, len(counts)+2)
	var cum uint64
	for i, c := range counts {
		cum += c
		le := math.Inf(1)
		if i < len(h.bounds) {
			le = h.bounds[i]
		}
		samples = append(samples, sample{suffix: "_bucket", labels: []label{{"le", formatFloat(le)}}, value: float64(cum)})
	}
	samples = append(samples, sample{suffix: "_sum", value: sum}, sample{suffix: "_count", value: float64(cum)})
	add(family{name: h.name, help: h.help, typ: typeHistogram, samples: samples})
}
