package retention

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// API is what the Follower reads of the API server, from the watches'
// caches (kube.Client): no request of its own.
type API interface {
	// Pods returns the pods bound to the node and whether their watch has
	// synced.
	Pods() ([]*corev1.Pod, bool)
	// StatefulSet returns the StatefulSet namespace/name (nil: none) and
	// whether the StatefulSets' watch has synced.
	StatefulSet(namespace, name string) (*apiclient.StatefulSet, bool)
	// StatefulSetsSynced reports whether the StatefulSets' watch has
	// listed them at least once.
	StatefulSetsSynced() bool
}

// Store is the node's IPAM store (ipamstore.Store).
type Store interface {
	Entries() ([]reservation.Entry, error)
	Retain(network string, changes []ipam.RetentionChange) (int, error)
}

// Options configure a Follower.
type Options struct {
	API   API
	Store Store
	// Interval is how often a pass runs (checkpointd's --interval).
	Interval time.Duration
	// ClaimedLater returns, by namespace and identity, the node that
	// claimed an identity this node holds after it (the placement
	// publisher's last pass: the pod runs there now); nil: no placement.
	ClaimedLater func() map[placement.Key]string
	// Registry receives the follower's metrics (nil: not exported).
	Registry prometheus.Registerer
	Now      func() time.Time
	Log      *slog.Logger
}

// Follower keeps the node's StatefulSet pods' reservations following their
// StatefulSets: each pass reads the store once and the watches' caches,
// decides (Follow, Decide) and applies the changes, one transaction per
// network that has any.
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
			Help: "Records changed to follow StatefulSets, by action: follow (a running pod's allocation), refresh (a policy seen changed), release (scaled down or deleted with Delete), expire (deleted with Retain: its duration from then)."}, []string{"action"}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "retention_errors_total",
			Help: "Follower passes that could not read or write the IPAM store."}),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(f.held, f.changes, f.errs)
	}
	return f
}

// Run runs a pass every interval until ctx is done.
func (f *Follower) Run(ctx context.Context) {
	t := time.NewTicker(f.opts.Interval)
	defer t.Stop()
	for {
		f.Pass()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass runs one pass and returns the changes it applied (for tests and
// logs). Until both watches have synced it changes nothing: what is not
// known is not acted on.
func (f *Follower) Pass() []ipam.RetentionChange {
	pods, podsSynced := f.opts.API.Pods()
	if !f.opts.API.StatefulSetsSynced() {
		return nil
	}
	entries, err := f.opts.Store.Entries()
	if err != nil {
		f.fail("cannot read the IPAM store", err)
		return nil
	}
	byUID := map[string]*corev1.Pod{}
	if podsSynced {
		for _, p := range pods {
			byUID[string(p.UID)] = p
		}
	}
	now := f.opts.Now()
	var later map[placement.Key]string
	if f.opts.ClaimedLater != nil {
		later = f.opts.ClaimedLater()
	}
	byNetwork := map[string][]ipam.RetentionChange{}
	held := 0
	seen := map[string]bool{} // network/namespace/name decided already (one identity, several interfaces)
	for _, e := range entries {
		key := e.Network + "/" + e.Identity.Namespace + "/" + e.Identity.Name
		var cs []ipam.RetentionChange
		switch {
		case e.Held():
			held++
			if !seen["held/"+key] {
				seen["held/"+key] = true
				cs = Decide(e.Record, f.statefulSet(e.Identity.Namespace, e.StatefulSet.Name),
					later[placement.Key{Namespace: e.Identity.Namespace, Identity: e.Identity.Name}], now)
			}
		case follows(e.Record):
			p := byUID[e.UID]
			if p == nil || p.Namespace != e.Identity.Namespace || p.Name != e.Identity.Name || seen["pod/"+key+"/"+e.UID] {
				continue // not seen running here (yet, or any more): left as it is
			}
			seen["pod/"+key+"/"+e.UID] = true
			cs = f.followPod(e.Record, p)
		}
		byNetwork[e.Network] = append(byNetwork[e.Network], cs...)
	}
	f.held.Set(float64(held))
	var applied []ipam.RetentionChange
	failed := false
	for _, n := range slices.Sorted(maps.Keys(byNetwork)) {
		cs := byNetwork[n]
		if len(cs) == 0 {
			continue
		}
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

// follows reports whether r is a running pod's allocation whose
// reservation may follow a StatefulSet: a reservation of the workload
// kind, for a pod-name identity.
func follows(r *reservation.Record) bool {
	_, keyed := contract.IdentityKey(r.Identity.Name)
	return r.State == reservation.Allocated && r.Duration > 0 && r.Retention != contract.RetentionFixed && r.UID != "" && !keyed
}

// followPod returns the change recording what pod p's allocation r
// follows, none when it is recorded already or not known yet.
func (f *Follower) followPod(r *reservation.Record, p *corev1.Pod) []ipam.RetentionChange {
	var set *apiclient.StatefulSet
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "StatefulSet" {
			set = f.statefulSet(p.Namespace, o.Name)
		}
	}
	want, known := Follow(p, set)
	if !known || sameRef(r.StatefulSet, want) {
		return nil
	}
	return []ipam.RetentionChange{{Action: ipam.FollowPod, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), StatefulSet: want}}
}

func (f *Follower) statefulSet(namespace, name string) *apiclient.StatefulSet {
	s, _ := f.opts.API.StatefulSet(namespace, name)
	return s
}

func sameRef(a, b *reservation.StatefulSetRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func (f *Follower) log(network string, c ipam.RetentionChange) {
	switch c.Action {
	case ipam.FollowPod:
		if c.StatefulSet == nil {
			f.opts.Log.Info("pod's reservation follows no StatefulSet (it has none): it lasts its duration", "network", network,
				"pod", c.Namespace+"/"+c.Name)
			return
		}
		f.opts.Log.Info("pod's reservation follows its StatefulSet", "network", network, "pod", c.Namespace+"/"+c.Name,
			"statefulSet", c.StatefulSet.Name, "whenScaled", c.StatefulSet.WhenScaled, "whenDeleted", c.StatefulSet.WhenDeleted)
	case ipam.Refresh:
		f.opts.Log.Info("reservation's StatefulSet changed", "network", network, "pod", c.Namespace+"/"+c.Name,
			"statefulSet", c.StatefulSet.Name, "whenScaled", c.StatefulSet.WhenScaled, "whenDeleted", c.StatefulSet.WhenDeleted)
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
