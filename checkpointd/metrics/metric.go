package metrics

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
)

// The metric types checkpointd exports: counters, gauges, one-label vectors
// of both, and histograms. Each is safe for concurrent use and is exposed
// by a Registry it is registered with (expose.go).

// Metric types as the text exposition format names them.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
	typeSummary   = "summary"
)

// desc is a metric family's name and help text.
type desc struct{ name, help string }

func newDesc(name, help string, labels ...string) desc {
	if !validName(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !validName(l) || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: invalid label name %q of %s", l, name))
		}
	}
	return desc{name: name, help: help}
}

// validName reports whether s is a metric or label name of the classic
// character set, [a-zA-Z_:][a-zA-Z0-9_:]* (label names take no colon; ours
// are constants, so the stricter check is not needed).
func validName(s string) bool {
	for i, r := range s {
		letter := r == '_' || r == ':' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// value is a float64 updated atomically.
type value struct{ bits atomic.Uint64 }

func (v *value) load() float64   { return math.Float64frombits(v.bits.Load()) }
func (v *value) store(f float64) { v.bits.Store(math.Float64bits(f)) }
func (v *value) add(d float64) {
	for {
		old := v.bits.Load()
		if v.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Counter is a value that only goes up (it starts at 0 with the process).
type Counter struct {
	desc
	v *value
}

// NewCounter returns a counter named name (the full name, with its
// checkpointd_ prefix) described by help.
func NewCounter(name, help string) *Counter {
	return &Counter{desc: newDesc(name, help), v: new(value)}
}

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d, which must not be negative.
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic(fmt.Sprintf("metrics: counter %s decreased by %v", c.name, d))
	}
	c.v.add(d)
}

// Value returns the counter's current value (for tests).
func (c *Counter) Value() float64 { return c.v.load() }

func (c *Counter) collect(add func(family)) {
	add(family{name: c.name, help: c.help, typ: typeCounter, samples: []sample{{value: c.v.load()}}})
}

// Gauge is a value that goes up and down.
type Gauge struct {
	desc
	v *value
}

// NewGauge returns a gauge named name described by help.
func NewGauge(name, help string) *Gauge { return &Gauge{desc: newDesc(name, help), v: new(value)} }

// Set sets the gauge to f.
func (g *Gauge) Set(f float64) { g.v.store(f) }

// Inc adds 1.
func (g *Gauge) Inc() { g.v.add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.v.add(-1) }

// Add adds d (which may be negative).
func (g *Gauge) Add(d float64) { g.v.add(d) }

// Value returns the gauge's current value (for tests).
func (g *Gauge) Value() float64 { return g.v.load() }

func (g *Gauge) collect(add func(family)) {
	add(family{name: g.name, help: g.help, typ: typeGauge, samples: []sample{{value: g.v.load()}}})
}

// vec is a family of one-label series, each created on first use.
type vec struct {
	desc
	label  string
	mu     sync.Mutex
	series map[string]*value
}

func newVec(name, help, labelName string) vec {
	return vec{desc: newDesc(name, help, labelName), label: labelName, series: map[string]*value{}}
}

func (v *vec) with(val string) *value {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.series[val]
	if !ok {
		s = new(value)
		v.series[val] = s
	}
	return s
}

// Reset removes every series (a series not set again is no longer exposed).
func (v *vec) Reset() {
	v.mu.Lock()
	clear(v.series)
	v.mu.Unlock()
}

// Len returns the number of series (label values) exposed.
func (v *vec) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.series)
}

// samples returns one sample per series, sorted by label value.
func (v *vec) samples() []sample {
	v.mu.Lock()
	out := make([]sample, 0, len(v.series))
	for val, s := range v.series {
		out = append(out, sample{labels: []label{{v.label, val}}, value: s.load()})
	}
	v.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].labels[0].value < out[j].labels[0].value })
	return out
}

// CounterVec is a family of counters told apart by one label.
type CounterVec struct{ vec }

// NewCounterVec returns a counter family named name with the label labelName.
func NewCounterVec(name, help, labelName string) *CounterVec {
	return &CounterVec{newVec(name, help, labelName)}
}

// WithLabelValues returns the counter of label value val (created at 0 and
// exposed from then on).
func (v *CounterVec) WithLabelValues(val string) *Counter {
	return &Counter{desc: v.desc, v: v.with(val)}
}

func (v *CounterVec) collect(add func(family)) {
	add(family{name: v.name, help: v.help, typ: typeCounter, samples: v.samples()})
}

// GaugeVec is a family of gauges told apart by one label.
type GaugeVec struct{ vec }

// NewGaugeVec returns a gauge family named name with the label labelName.
func NewGaugeVec(name, help, labelName string) *GaugeVec {
	return &GaugeVec{newVec(name, help, labelName)}
}

// WithLabelValues returns the gauge of label value val (created at 0 and
// exposed from then on, until Reset).
func (v *GaugeVec) WithLabelValues(val string) *Gauge {
	return &Gauge{desc: v.desc, v: v.with(val)}
}

func (v *GaugeVec) collect(add func(family)) {
	add(family{name: v.name, help: v.help, typ: typeGauge, samples: v.samples()})
}
