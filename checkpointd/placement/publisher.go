package placement

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

// Entries reads the IPAM store (checkpointd/ipamstore.Store).
type Entries interface {
	Entries() ([]reservation.Entry, error)
}

// ErrNotYet, from Entries, skips the pass quietly: there is no store to
// publish yet (a new node, a store rebuilt that waits for the record), and
// publishing none would remove the node's entries from the index.
var ErrNotYet = errors.New("no store to publish yet")

// Options configure a Publisher.
type Options struct {
	// Node is this node's name, as its credentials (system:node:<Node>) say.
	Node string
	// Store is the node's IPAM store.
	Store Entries
	// Holds, when set, is asked once per pass for the test of whether an
	// entry's address is one the node holds now (ipamstore.Store.NodeHolds);
	// no other address is ever published. An error with a test names the
	// networks it cannot answer for (logged; their entries are not
	// published); an error without one skips the pass.
	Holds func() (func(reservation.Entry) bool, error)
	// NodeObject returns the node's Node as last seen (false: not yet):
	// its UID goes into the record, which counts only under it.
	NodeObject func() (*corev1.Node, bool)
	// Record returns the node's record as the watch last saw it (false:
	// not listed yet): the publisher writes when the store differs from
	// it, so that a spec changed by anyone else is written back.
	Record func() (*placementv1.NodeRecord, bool)
	// Interval is how often the store is compared with the record (default 5s).
	Interval time.Duration
	// Timeout bounds each API request (default 5s).
	Timeout time.Duration
	// MaxBackoff bounds the wait before a failed write is tried again
	// (default 5m; the first wait is Interval, doubled each time, each
	// longer by up to half again at random, so that nodes whose writes
	// failed together do not come back together).
	MaxBackoff time.Duration
	// Registry receives the publisher's metrics (nil: not exported).
	Registry prometheus.Registerer
	// Log receives every write and every new kind of failure.
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Publisher keeps the node's record equal to what its IPAM store holds.
type Publisher struct {
	opts Options
	api  API

	writes     *prometheus.CounterVec
	errs       *prometheus.CounterVec
	records    prometheus.Gauge
	superseded prometheus.Gauge

	written *placementv1.NodeRecordSpec // the spec as last written (nil: not yet)
	steps   wait.Backoff                // the waits after the next failed writes
	retryAt time.Time                   // no write before then (a write failed)
	// unserved: the last write failed while the watch had never listed
	// the record (before deploy/placement/nodes is applied, say); once
	// it lists it, the write is tried at once, not after the back-off.
	unserved bool
	cleared  bool // the former Node annotation is known gone

	mu     sync.Mutex
	logged map[string]string // the last failure logged per step
	later  map[string]bool   // identities another node claimed later, logged once
}

// New returns a publisher of opts.Node's record through api.
func New(api API, opts Options) *Publisher {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Publisher{
		opts: opts, api: api, logged: map[string]string{}, later: map[string]bool{},
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "placement_writes_total",
			Help: "Entries written to the node's NodeRecord, by kind: claim (a new identity or pod), update (a reservation's end, addresses), release (expiry or release)."}, []string{"kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "placement_errors_total",
			Help: "Failed placement steps, by step (store, ranges, node, write, full)."}, []string{"step"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Name: metrics.Namespace + "placement_records",
			Help: "Sticky identities this node holds and publishes."}),
		superseded: prometheus.NewGauge(prometheus.GaugeOpts{Name: metrics.Namespace + "placement_superseded",
			Help: "Sticky identities this node holds that the index gives to another node (it ran their pod since)."}),
	}
	p.steps = p.backoff()
	for _, k := range []string{WriteClaim, WriteUpdate, WriteRelease} {
		p.writes.WithLabelValues(k) // exported as 0 before the first write
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(p.writes, p.errs, p.records, p.superseded)
	}
	return p
}

// The kinds of entry change a write carries (placement_writes_total).
const (
	WriteClaim   = "claim"
	WriteUpdate  = "update"
	WriteRelease = "release"
)

func (p *Publisher) backoff() wait.Backoff {
	return wait.Backoff{Duration: p.opts.Interval, Factor: 2, Jitter: 0.5, Steps: 64, Cap: p.opts.MaxBackoff}
}

// Run publishes until ctx is done.
func (p *Publisher) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass compares the store with the record once and writes the difference.
func (p *Publisher) Pass(ctx context.Context) {
	want, ok := p.desired()
	if !ok {
		return
	}
	node, ok := p.opts.NodeObject()
	if !ok || node == nil || node.UID == "" {
		p.fail("node", errors.New("the node's Node is not known yet"))
		return
	}
	p.ok("node")
	spec := placementv1.NodeRecordSpec{NodeUID: node.UID, Entries: want}
	cur := p.current()
	p.noteVerdicts()
	p.clearFormer(ctx, node)
	if cur != nil && sameSpec(*cur, spec) {
		return
	}
	now := p.opts.Now()
	if p.unserved && p.listed() {
		p.retryAt, p.steps, p.unserved = time.Time{}, p.backoff(), false
	}
	if now.Before(p.retryAt) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	rec, err := p.api.Publish(wctx, spec)
	cancel()
	if err != nil {
		p.retryAt = now.Add(p.steps.Step())
		p.unserved = !p.listed()
		p.fail("write", err)
		return
	}
	p.count(cur, spec)
	p.written, p.retryAt, p.steps = &rec.Spec, time.Time{}, p.backoff()
	p.ok("write")
	p.opts.Log.Debug("placement: record written", "entries", len(spec.Entries))
}

// desired reads the store and returns the entries the node should have;
// false when the pass cannot go on.
func (p *Publisher) desired() ([]placementv1.Entry, bool) {
	entries, err := p.opts.Store.Entries()
	if errors.Is(err, ErrNotYet) {
		return nil, false
	}
	if err != nil {
		p.fail("store", err)
		return nil, false
	}
	p.ok("store")
	var holds func(reservation.Entry) bool
	if p.opts.Holds != nil {
		holds, err = p.opts.Holds()
		switch {
		case err != nil && holds == nil:
			p.fail("ranges", err)
			return nil, false
		case err != nil: // some networks only: theirs are not published
			p.fail("ranges", err)
		default:
			p.ok("ranges")
		}
	}
	want, dropped := Desired(p.opts.Node, entries, p.opts.Now(), holds)
	if dropped > 0 {
		p.fail("full", errors.New("the node holds more sticky identities than a record takes; its running pods' and latest reservations' entries are published"))
	} else {
		p.ok("full")
	}
	p.records.Set(float64(len(want)))
	return want, true
}

// listed reports whether the watch of the record has listed it (the API
// serves the node its record).
func (p *Publisher) listed() bool {
	if p.opts.Record == nil {
		return false
	}
	_, synced := p.opts.Record()
	return synced
}

// current is the record's spec as the watch last saw it, else as last
// written (nil: not known).
func (p *Publisher) current() *placementv1.NodeRecordSpec {
	if p.opts.Record != nil {
		if r, synced := p.opts.Record(); synced {
			if r == nil {
				return nil
			}
			return &r.Spec
		}
	}
	return p.written
}

// sameSpec reports whether two specs say the same.
func sameSpec(a, b placementv1.NodeRecordSpec) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// count adds to placement_writes_total what the write changed since was.
func (p *Publisher) count(was *placementv1.NodeRecordSpec, now placementv1.NodeRecordSpec) {
	old := map[[2]string]placementv1.Entry{}
	if was != nil {
		for _, e := range was.Entries {
			old[[2]string{e.Namespace, e.Identity}] = e
		}
	}
	for _, e := range now.Entries {
		k := [2]string{e.Namespace, e.Identity}
		o, ok := old[k]
		delete(old, k)
		switch {
		case !ok || o.PodUID != e.PodUID || !o.Since.Equal(&e.Since):
			p.writes.WithLabelValues(WriteClaim).Inc()
		case !sameEntry(o, e):
			p.writes.WithLabelValues(WriteUpdate).Inc()
		}
	}
	p.writes.WithLabelValues(WriteRelease).Add(float64(len(old)))
}

func sameEntry(a, b placementv1.Entry) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// fail counts a failed step and logs it when it differs from the step's last
// logged failure (the API server being away fails every pass alike).
func (p *Publisher) fail(step string, err error) {
	p.errs.WithLabelValues(step).Inc()
	msg := err.Error()
	if step == "write" && (apierrors.IsForbidden(err) || resourceMissing(err)) {
		msg = "nodes may not write their NodeRecord yet (deploy/placement, then deploy/placement/nodes once its policy is in effect: docs/guides/placement.md): " + msg
	}
	p.mu.Lock()
	same := p.logged[step] == msg
	p.logged[step] = msg
	p.mu.Unlock()
	if same {
		p.opts.Log.Debug("placement step failed again", "step", step, "err", msg)
		return
	}
	p.opts.Log.Warn("placement step failed; retried", "step", step, "err", msg)
}

// ok forgets a step's last failure, so the next one is logged.
func (p *Publisher) ok(step string) {
	p.mu.Lock()
	delete(p.logged, step)
	p.mu.Unlock()
}
