package retention

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// Verdicts is where the controller's verdicts come from: the node's own
// NodeRecord as its watch last saw it (placement.Watcher).
type Verdicts interface {
	// Record returns the record (nil: none) and whether it was listed.
	Record() (*placementv1.NodeRecord, bool)
	// Served reports whether the API serves the node its record (known:
	// it answered either way).
	Served() (ok, known bool)
	// Changed receives a value when the record changed (several changes
	// may come as one).
	Changed() <-chan struct{}
}

// Store is the node's IPAM store (ipamstore.Store).
type Store interface {
	Entries() ([]reservation.Entry, error)
	Retain(network string, changes []ipam.RetentionChange) (int, error)
}

// Options configure a Follower.
type Options struct {
	// Verdicts is nil when following is off (--follow-statefulsets=false,
	// or placement off): held reservations then last their own duration.
	Verdicts Verdicts
	Store    Store
	// Interval is how often a pass runs (checkpointd's --interval).
	Interval time.Duration
	// Registry receives the follower's metrics (nil: not exported).
	Registry prometheus.Registerer
	Now      func() time.Time
	Log      *slog.Logger
}

// Follower applies the controller's verdicts to the node's IPAM store:
// each pass reads the store once and the record as last seen, decides
// (Decide) and applies the changes, one transaction per network that has
// any.
type Follower struct {
	opts    Options
	held    prometheus.Gauge
	changes *prometheus.CounterVec
	errs    prometheus.Counter

	mu     sync.Mutex
	logged string // the last failure logged
}

// New returns a follower.
func New(opts Options) *Follower {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	f := &Follower{opts: opts,
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: metrics.Namespace + "retention_held",
			Help: "Reservations a StatefulSet keeps (its pod deleted; no clock ends them), on the node."}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "retention_changes_total",
			Help: "Records changed as stickyip-controller says, by action: follow (a running pod's allocation), refresh (its account changed), release (its volume claim is deleted), expire (its own duration from now)."}, []string{"action"}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "retention_errors_total",
			Help: "Follower passes that could not read or write the IPAM store."}),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(f.held, f.changes, f.errs)
	}
	return f
}

// Run runs a pass every interval, and as soon as the record changed, until
// ctx is done: a verdict that a running pod's reservation ends with it
// must reach the store before the pod's DEL, which may come within a
// second of the StatefulSet's deletion (then a pod of the name created
// again right after would take the held address before the next tick).
func (f *Follower) Run(ctx context.Context) {
	t := time.NewTicker(f.opts.Interval)
	defer t.Stop()
	var changed <-chan struct{}
	if v := f.opts.Verdicts; v != nil {
		changed = v.Changed()
	}
	for {
		f.Pass()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed:
		}
	}
}

// Pass runs one pass and returns the changes it applied (for tests and
// logs). While the API server has not said whether it serves the node its
// record, it changes nothing: what is not known is not acted on.
func (f *Follower) Pass() []ipam.RetentionChange {
	following, off := false, WhyOff
	var rec *placementv1.NodeRecord
	if v := f.opts.Verdicts; v != nil {
		ok, known := v.Served()
		if !known {
			return nil
		}
		following, off = ok, WhyRefused
		if following {
			if rec, known = v.Record(); !known {
				return nil
			}
		}
	}
	entries, err := f.opts.Store.Entries()
	if err != nil {
		f.fail("cannot read the IPAM store", err)
		return nil
	}
	held := 0
	for _, e := range entries {
		if e.Held() {
			held++
		}
	}
	f.held.Set(float64(held))
	byNetwork := Decide(entries, rec, following, off, f.opts.Now())
	var applied []ipam.RetentionChange
	failed := false
	for _, n := range slices.Sorted(maps.Keys(byNetwork)) {
		cs := byNetwork[n]
		if _, err := f.opts.Store.Retain(n, cs); err != nil {
			f.fail("cannot apply retention changes to network "+n, err)
			failed = true
			continue
		}
		for _, c := range cs {
			f.changes.WithLabelValues(c.Action.String()).Inc()
			f.log(n, c)
		}
		applied = append(applied, cs...)
	}
	if !failed {
		f.ok()
	}
	return applied
}

func (f *Follower) log(network string, c ipam.RetentionChange) {
	switch c.Action {
	case ipam.FollowPod:
		f.opts.Log.Info("pod's reservation follows its StatefulSet", "network", network, "pod", c.Namespace+"/"+c.Name,
			"statefulSet", c.StatefulSet.Name, "why", c.StatefulSet.Why)
	case ipam.Refresh:
		f.opts.Log.Info("held reservation's account changed", "network", network, "pod", c.Namespace+"/"+c.Name,
			"statefulSet", c.StatefulSet.Name, "why", c.Why)
	default:
		f.opts.Log.Info("reservation's StatefulSet no longer keeps it", "network", network, "pod", c.Namespace+"/"+c.Name,
			"action", c.Action.String(), "why", c.Why)
	}
}

// fail counts a failed pass and logs it when it differs from the last one.
func (f *Follower) fail(what string, err error) {
	f.errs.Inc()
	f.mu.Lock()
	same := f.logged == what+err.Error()
	f.logged = what + err.Error()
	f.mu.Unlock()
	if !same {
		f.opts.Log.Warn("retention: "+what+"; tried again next pass", "err", err)
	}
}

func (f *Follower) ok() {
	f.mu.Lock()
	f.logged = ""
	f.mu.Unlock()
}
