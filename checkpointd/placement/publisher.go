package placement

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/reservation"
)

// Entries reads the IPAM store (checkpointd/ipamstore.Store).
type Entries interface {
	Entries() ([]reservation.Entry, error)
}

// ErrNotYet, from Entries, skips the pass quietly: there is no store to
// publish yet (a new node), and publishing none would remove the node's
// entries from the index.
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
	// WrittenFile keeps the list of shards holding the node's entries
	// across restarts ("": not kept).
	WrittenFile string
	// Interval is how often the store is compared with the shards (default 5s).
	Interval time.Duration
	// Timeout bounds each API request (default 5s).
	Timeout time.Duration
	// Resync is how long a shard as last seen is trusted before it is read
	// again (default 5m): a shard changed by someone else (another node's
	// later claim of an identity whose pod runs here, an administrator, the
	// garbage collector) is repaired within that time. Every write returns
	// the shard as written, which serves as a read; a claim the index
	// policy finds stale reads the shard again at once.
	Resync time.Duration
	// MaxBackoff bounds the wait before a shard whose write failed is tried
	// again (default 5m; the first wait is Interval, doubled each time;
	// each wait is longer by up to half again, at random).
	MaxBackoff time.Duration
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

	shards  map[shardRef]view    // each shard as the API server last showed it
	retry   map[shardRef]backoff // shards whose last write failed
	nodeUID types.UID            // the Node's UID (the shards' owner), read once per pass that writes
	refused map[refusal]bool     // claims the index policy refused
	lost    map[Key]string       // identities another node claimed later, by that node
	logged  map[string]string    // last failure logged per step
	mu      sync.Mutex           // guards logged, and lost's replacement (ClaimedLater reads it)
	reads   prometheus.Counter   // API reads (shards and the Node)

	listed     map[shardRef]bool  // the shards the Node's ShardsAnnotation lists (nil: not read yet)
	nodeWrites prometheus.Counter // writes of that annotation

	// published is what the last pass found in place everywhere (every
	// shard settled, nothing failed), until resyncAt, when the first shard
	// seen is due for a read: a pass that wants the same before then has
	// nothing to do.
	published map[Key]Line
	resyncAt  time.Time
	fails     int // failed steps (fail), to tell a pass that settled
	contested int // shards left with claims refused as stale (publish): not settled either
	visits    int // shards compared with the store (publish)

	takenWait time.Duration // the least wait after "reference taken:" (takenWait; tests shorten it)
}

type view struct {
	shard *Shard
	at    time.Time
}

// backoff is when a shard whose write failed is tried again, and the
// waits after its next failures.
type backoff struct {
	steps wait.Backoff
	next  time.Time
}

// refusal is a claim the index policy refused: not tried again for the
// same pod and ADD (the pod is not, or no longer, bound to this node).
type refusal struct {
	key   Key
	pod   string
	since time.Time
}

// New returns a publisher that reaches the API server with cfg (the node's
// own kubeconfig).
func New(cfg *rest.Config, opts Options) (*Publisher, error) {
	c, err := apiclient.New(cfg)
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
		opts: opts, api: api,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "placement_writes_total",
			Help: "Writes to the placement index (its ConfigMaps), by kind: claim (an ADD), update (a reservation's end at DEL, addresses), release (expiry or release)."}, []string{"kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.Namespace + "placement_errors_total",
			Help: "Failed placement steps, by step (store, ranges, written, node, get, apply, refused, taken, entry, full, list)."}, []string{"step"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Name: metrics.Namespace + "placement_records",
			Help: "Sticky identities this node holds and publishes."}),
		superseded: prometheus.NewGauge(prometheus.GaugeOpts{Name: metrics.Namespace + "placement_superseded",
			Help: "Sticky identities this node holds that another node claimed later (it ran their pod since)."}),
		reads: prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "placement_reads_total",
			Help: "Reads of the placement index (its ConfigMaps) and of the node's Node."}),
		nodeWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: metrics.Namespace + "placement_node_writes_total",
			Help: "Writes of the node's Node annotation " + ShardsAnnotation + " (the shards holding its entries, which a re-installed node reads)."}),
		shards:  map[shardRef]view{},
		retry:   map[shardRef]backoff{},
		refused: map[refusal]bool{},
		lost:    map[Key]string{},
		logged:  map[string]string{},

		takenWait: takenWait,
	}
	for _, k := range []string{WriteClaim, WriteUpdate, WriteRelease} {
		p.writes.WithLabelValues(k) // exported as 0 before the first write
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(p.writes, p.errs, p.records, p.superseded, p.reads, p.nodeWrites)
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
	want, ok := p.desired()
	if !ok {
		return
	}
	now := p.opts.Now()
	if p.published != nil && now.Before(p.resyncAt) && len(p.retry) == 0 && maps.EqualFunc(want, p.published, Line.Equal) {
		return // in place, as the last pass left it
	}
	p.published = nil
	fails, contested := p.fails, p.contested
	// The Node may have been deleted and registered again since the last
	// pass (a new UID): an owner reference to the old one would be dropped
	// by the garbage collector.
	p.nodeUID = ""
	byShard := map[shardRef]map[string]Line{}
	for k, l := range want {
		ref := shardRef{k.Namespace, ShardOf(k.Identity)}
		if byShard[ref] == nil {
			byShard[ref] = map[string]Line{}
		}
		byShard[ref][k.Identity] = l
	}
	refs := slices.Collect(maps.Keys(byShard))
	for _, ref := range p.written.refs() {
		if byShard[ref] == nil {
			refs = append(refs, ref)
		}
	}
	slices.SortFunc(refs, compareRefs)
	refs = rotate(refs, p.opts.Node)
	lost := map[Key]string{}
	for _, ref := range refs {
		if b, ok := p.retry[ref]; ok && now.Before(b.next) {
			continue
		}
		p.publish(ctx, ref, p.fit(ref, byShard[ref]), now, lost)
	}
	p.noteLost(lost)
	p.superseded.Set(float64(len(lost)))
	p.list(ctx)
	for r := range p.refused {
		if l, ok := want[r.key]; !ok || l.Pod != r.pod || !l.Since.Equal(r.since) {
			delete(p.refused, r)
		}
	}
	if p.fails == fails && p.contested == contested && len(p.retry) == 0 && len(p.refused) == 0 {
		p.published, p.resyncAt = want, now.Add(p.opts.Resync)
		for _, v := range p.shards {
			if at := v.at.Add(p.opts.Resync); at.Before(p.resyncAt) {
				p.resyncAt = at
			}
		}
	}
}

// desired reads the store and returns the entries the node should have;
// false when the pass cannot go on.
func (p *Publisher) desired() (map[Key]Line, bool) {
	entries, err := p.opts.Store.Entries()
	if errors.Is(err, ErrNotYet) {
		return nil, false
	}
	if err != nil {
		p.fail("store", "", err)
		return nil, false
	}
	var holds func(reservation.Entry) bool
	if p.opts.Holds != nil {
		holds, err = p.opts.Holds()
		switch {
		case err != nil && holds == nil:
			p.fail("ranges", "", err)
			return nil, false
		case err != nil: // some networks only: theirs are not published
			p.fail("ranges", "", err)
		default:
			p.ok("ranges")
		}
	}
	p.ok("store")
	want := Desired(p.opts.Node, entries, p.opts.Now(), holds)
	p.records.Set(float64(len(want)))
	return want, true
}

// rotate returns refs, in order, starting at a place of their own for node:
// nodes that start together (a burst of new pods, a cluster booting) meet
// in different shards, rather than all in the first one, where each
// would wait for the API server to apply the others' writes first.
func rotate(refs []shardRef, node string) []shardRef {
	if len(refs) < 2 {
		return refs
	}
	h := fnv.New32a()
	h.Write([]byte(node))
	i := int(h.Sum32() % uint32(len(refs)))
	return append(refs[i:], refs[:i]...)
}
