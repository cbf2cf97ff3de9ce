package placement

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/reservation"
)

// Entries reads the IPAM store (checkpointd/ipamstore.Store).
type Entries interface {
	Entries() ([]reservation.Entry, error)
}

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
	// WrittenFile keeps the list of shards holding the node's entries
	// across restarts ("": not kept).
	WrittenFile string
	// Interval is how often the store is compared with the shards (default 5s).
	Interval time.Duration
	// Timeout bounds each API request (default 5s).
	Timeout time.Duration
	// Resync is how long a shard as last seen is trusted before it is read
	// again (default 5m): a shard changed by someone else (an administrator,
	// the garbage collector) is repaired within that time.
	Resync time.Duration
	// Registry receives the publisher's metrics (nil: not exported).
	Registry prometheus.Registerer
	// Log receives every write and every new kind of failure.
	Log *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Publisher keeps the node's entries in its namespaces' placement index
// equal to what its IPAM store holds.
type Publisher struct {
	opts    Options
	api     API
	written *written

	writes     *prometheus.CounterVec
	errs       *prometheus.CounterVec
	records    prometheus.Gauge
	superseded prometheus.Gauge

	shards  map[shardRef]view // each shard as the API server last showed it
	nodeUID types.UID         // the Node's UID (the shards' owner), read once per pass that writes
	refused map[refusal]bool  // claims the API server refused
	lost    map[Key]string    // identities another node claimed later, by that node
	logged  map[string]string // last failure logged per step
	mu      sync.Mutex        // guards logged
}

type view struct {
	shard *Shard
	at    time.Time
}

// refusal is a claim the API server refused: not tried again for the same
// pod and ADD (the pod is not, or no longer, bound to this node).
type refusal struct {
	key   Key
	pod   string
	since time.Time
}

// New returns a publisher that reaches the API server with cfg (the node's
// own kubeconfig).
func New(cfg *rest.Config, opts Options) (*Publisher, error) {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewWithAPI(NewAPI(c, opts.Node), opts), nil
}

// NewWithAPI is New on a given API.
func NewWithAPI(api API, opts Options) *Publisher {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Publisher{
		opts: opts, api: api,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_writes_total",
			Help: "Writes to the placement index (its ConfigMaps), by kind: claim (an ADD), update (an ADD of the same pod again), release (expiry or release)."}, []string{"kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_errors_total",
			Help: "Failed placement steps, by step (store, ranges, written, node, get, apply, refused)."}, []string{"step"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: "placement_records",
			Help: "Sticky identities this node holds and publishes."}),
		superseded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: "placement_superseded",
			Help: "Sticky identities this node holds that another node claimed later (it ran their pod since)."}),
		shards:  map[shardRef]view{},
		refused: map[refusal]bool{},
		lost:    map[Key]string{},
		logged:  map[string]string{},
	}
	for _, k := range []string{WriteClaim, WriteUpdate, WriteRelease} {
		p.writes.WithLabelValues(k) // exported as 0 before the first write
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(p.writes, p.errs, p.records, p.superseded)
	}
	w, err := loadWritten(opts.WrittenFile)
	if err != nil {
		p.fail("written", "", err)
	}
	p.written = w
	return p
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

// Pass compares the store with the shards once and writes the difference.
func (p *Publisher) Pass(ctx context.Context) {
	entries, err := p.opts.Store.Entries()
	if err != nil {
		p.fail("store", "", err)
		return
	}
	var holds func(reservation.Entry) bool
	if p.opts.Holds != nil {
		holds, err = p.opts.Holds()
		switch {
		case err != nil && holds == nil:
			p.fail("ranges", "", err)
			return
		case err != nil: // some networks only: theirs are not published
			p.fail("ranges", "", err)
		default:
			p.ok("ranges")
		}
	}
	p.ok("store")
	// The Node may have been deleted and registered again since the last
	// pass (a new UID): an owner reference to the old one would be dropped
	// by the garbage collector.
	p.nodeUID = ""
	now := p.opts.Now()
	want := Desired(p.opts.Node, entries, now, holds)
	p.records.Set(float64(len(want)))
	byShard := map[shardRef]map[string]Want{}
	for k, h := range want {
		ref := shardRef{k.Namespace, ShardOf(k.Identity)}
		if byShard[ref] == nil {
			byShard[ref] = map[string]Want{}
		}
		byShard[ref][k.Identity] = h
	}
	refs := slices.Collect(maps.Keys(byShard))
	for ref := range p.written.set {
		if byShard[ref] == nil {
			refs = append(refs, ref)
		}
	}
	slices.SortFunc(refs, func(a, b shardRef) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	lost := map[Key]string{}
	for _, ref := range refs {
		p.publish(ctx, ref, byShard[ref], now, lost)
	}
	p.noteLost(lost)
	p.superseded.Set(float64(len(lost)))
	for r := range p.refused {
		if h, ok := want[r.key]; !ok || h.Pod != r.pod || !h.Since.Equal(r.since) {
			delete(p.refused, r)
		}
	}
}

// publish brings one shard to want, the node's entries there.
func (p *Publisher) publish(ctx context.Context, ref shardRef, want map[string]Want, now time.Time, lost map[Key]string) {
	skip := func(id string, h Hold) bool { return p.refused[refusal{Key{ref.Namespace, id}, h.Pod, h.Since}] }
	s, fresh, err := p.shard(ctx, ref, now, false)
	if err != nil {
		p.fail("get", ref.Namespace+"/"+ref.Name, err)
		return
	}
	steps, superseded := Plan(p.opts.Node, want, s, skip)
	if len(steps) > 0 && steps[0].Claim != "" && !fresh {
		// A claim decides on another node's entry: on the shard as it is now.
		if s, _, err = p.shard(ctx, ref, now, true); err != nil {
			p.fail("get", ref.Namespace+"/"+ref.Name, err)
			return
		}
		steps, superseded = Plan(p.opts.Node, want, s, skip)
	}
	p.ok("get")
	for _, id := range superseded {
		lost[Key{ref.Namespace, id}] = s.Holds[id].Node
	}
	for _, st := range steps {
		if !p.apply(ctx, ref, st, now) {
			return
		}
	}
}

// shard returns ref as last seen, reading it again when that is older than
// Resync or when reread; fresh reports whether it was read now.
func (p *Publisher) shard(ctx context.Context, ref shardRef, now time.Time, reread bool) (*Shard, bool, error) {
	if v, ok := p.shards[ref]; ok && !reread && now.Sub(v.at) < p.opts.Resync {
		return v.shard, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	s, err := p.api.Get(ctx, ref.Namespace, ref.Name)
	if err != nil {
		delete(p.shards, ref)
		return nil, false, err
	}
	p.shards[ref] = view{shard: s, at: now}
	return s, true, nil
}

// apply makes one write and reports whether it was made.
func (p *Publisher) apply(ctx context.Context, ref shardRef, st Step, now time.Time) bool {
	name := ref.Namespace + "/" + ref.Name
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if len(st.Mine) > 0 && p.nodeUID == "" {
		uid, err := p.api.NodeUID(ctx)
		if err != nil {
			p.fail("node", name, fmt.Errorf("read Node %s (the shards' owner): %w", p.opts.Node, err))
			return false
		}
		p.ok("node")
		p.nodeUID = uid
	}
	s, err := p.api.Apply(ctx, ref.Namespace, ref.Name, p.nodeUID, st.Mine, st.Force)
	if err != nil {
		delete(p.shards, ref) // read it again before the next write
		if st.Claim != "" && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) {
			h := st.Mine[st.Claim]
			p.refused[refusal{Key{ref.Namespace, st.Claim}, h.Pod, h.Since}] = true
			p.errs.WithLabelValues("refused").Inc()
			p.opts.Log.Warn("placement claim refused by the API server; not tried again for this pod",
				"identity", ref.Namespace+"/"+st.Claim, "pod", h.Pod, "shard", name, "err", err.Error())
			return false
		}
		p.fail("apply", name, err)
		return false
	}
	p.ok("apply")
	p.shards[ref] = view{shard: s, at: now}
	p.writes.WithLabelValues(st.Kind).Inc()
	if err := p.written.mark(ref, len(st.Mine) > 0); err != nil {
		p.fail("written", name, err)
	}
	args := []any{"shard", name, "entries", len(st.Mine)}
	if st.Claim != "" {
		h := st.Mine[st.Claim]
		args = append(args, "identity", ref.Namespace+"/"+st.Claim, "pod", h.Pod, "ips", h.IPs, "takeover", st.Force)
	}
	if got := s.Own(p.opts.Node); !holdsEqual(got, st.Mine) {
		p.opts.Log.Warn("placement shard shows other entries of this node than it applied", append(args, "shows", len(got))...)
	}
	p.opts.Log.Info("placement "+st.Kind+" written", args...)
	return true
}

// noteLost logs each identity another node claimed later, once.
func (p *Publisher) noteLost(now map[Key]string) {
	for k, n := range now {
		if p.lost[k] != n {
			p.opts.Log.Info("identity claimed later by another node (it ran the pod since); its entry is left to it",
				"identity", k.Namespace+"/"+k.Identity, "node", n)
		}
	}
	p.lost = now
}

// fail counts a failed step and logs it when it differs from the step's last
// logged failure (the API server being away fails every pass alike).
func (p *Publisher) fail(step, what string, err error) {
	p.errs.WithLabelValues(step).Inc()
	msg := err.Error()
	if step == "apply" && apierrors.IsForbidden(err) && strings.Contains(msg, "cannot patch") {
		msg = "deploy/placement is not installed (kubectl apply -k deploy/placement): " + msg
	}
	p.mu.Lock()
	same := p.logged[step] == msg
	p.logged[step] = msg
	p.mu.Unlock()
	if same {
		p.opts.Log.Debug("placement step failed again", "step", step, "what", what, "err", msg)
		return
	}
	p.opts.Log.Warn("placement step failed; retried every interval", "step", step, "what", what, "err", msg)
}

// ok forgets a step's last failure, so the next one is logged.
func (p *Publisher) ok(step string) {
	p.mu.Lock()
	delete(p.logged, step)
	p.mu.Unlock()
}
