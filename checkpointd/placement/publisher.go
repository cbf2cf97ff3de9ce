package placement

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
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
	// the garbage collector) is repaired within that time. Another node's
	// write makes the next write conflict, which reads the shard again at
	// once.
	Resync time.Duration
	// MaxBackoff bounds the wait before a shard whose write failed is tried
	// again (default 5m; the first wait is Interval, doubled each time).
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
	mu      sync.Mutex           // guards logged
}

type view struct {
	shard *Shard
	at    time.Time
}

// backoff is when a shard whose write failed is tried again.
type backoff struct {
	failures int
	next     time.Time
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
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_writes_total",
			Help: "Writes to the placement index (its ConfigMaps), by kind: claim (an ADD), update (a reservation's end at DEL, addresses), release (expiry or release)."}, []string{"kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "checkpointd", Name: "placement_errors_total",
			Help: "Failed placement steps, by step (store, ranges, written, node, get, apply, refused, entry, full)."}, []string{"step"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: "placement_records",
			Help: "Sticky identities this node holds and publishes."}),
		superseded: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: "placement_superseded",
			Help: "Sticky identities this node holds that another node claimed later (it ran their pod since)."}),
		shards:  map[shardRef]view{},
		retry:   map[shardRef]backoff{},
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
	want, ok := p.desired()
	if !ok {
		return
	}
	now := p.opts.Now()
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
	for ref := range p.written.set {
		if byShard[ref] == nil {
			refs = append(refs, ref)
		}
	}
	slices.SortFunc(refs, compareRefs)
	lost := map[Key]string{}
	for _, ref := range refs {
		if b, ok := p.retry[ref]; ok && now.Before(b.next) {
			continue
		}
		p.publish(ctx, ref, p.fit(ref, byShard[ref]), now, lost)
	}
	p.noteLost(lost)
	p.superseded.Set(float64(len(lost)))
	for r := range p.refused {
		if l, ok := want[r.key]; !ok || l.Pod != r.pod || !l.Since.Equal(r.since) {
			delete(p.refused, r)
		}
	}
}

// desired reads the store and returns the entries the node should have;
// false when the pass cannot go on.
func (p *Publisher) desired() (map[Key]Line, bool) {
	entries, err := p.opts.Store.Entries()
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

// publish brings node's value in one shard to want.
func (p *Publisher) publish(ctx context.Context, ref shardRef, want map[string]Line, now time.Time, lost map[Key]string) {
	name := ref.Namespace + "/" + ref.Name
	skip := func(id string, l Line) bool { return p.refused[refusal{Key{ref.Namespace, id}, l.Pod, l.Since}] }
	s, fresh, err := p.shard(ctx, ref, now, false)
	if err != nil {
		p.fail("get", name, err)
		return
	}
	steps, superseded := Plan(p.opts.Node, want, s, skip)
	if len(steps) > 0 && steps[0].Claim != "" && !fresh {
		// A claim decides on other nodes' entries: on the shard as it is now.
		if s, _, err = p.shard(ctx, ref, now, true); err != nil {
			p.fail("get", name, err)
			return
		}
		steps, superseded = Plan(p.opts.Node, want, s, skip)
	}
	p.ok("get")
	p.noteBadEntries(name, s)
	for _, id := range superseded {
		lost[Key{ref.Namespace, id}] = laterNode(s, p.opts.Node, id)
	}
	res := p.applyAll(ctx, ref, s, steps, now)
	if res == stale {
		// Another node wrote the shard since it was read: once more, on the
		// shard as it is now.
		if s, _, err = p.shard(ctx, ref, now, true); err != nil {
			p.fail("get", name, err)
			return
		}
		steps, _ = Plan(p.opts.Node, want, s, skip)
		res = p.applyAll(ctx, ref, s, steps, now)
	}
	switch res {
	case made:
		delete(p.retry, ref)
		if _, mine := s.Values[p.opts.Node]; len(steps) == 0 && !mine {
			if err := p.written.mark(ref, false); err != nil {
				p.fail("written", name, err)
			}
		}
	case stale:
		p.backOff(ref, now)
	}
}

// applyAll makes steps in order on s, the shard as last read, until one is
// not made.
func (p *Publisher) applyAll(ctx context.Context, ref shardRef, s *Shard, steps []Step, now time.Time) outcome {
	for _, st := range steps {
		if res := p.apply(ctx, ref, &s, st, now); res != made {
			return res
		}
	}
	return made
}

// outcome is what became of a write.
type outcome int

const (
	made   outcome = iota // made
	stale                 // refused: the shard changed since it was read
	failed                // refused or failed otherwise
)

// apply makes one write on *s, the shard as last read, and updates it.
func (p *Publisher) apply(ctx context.Context, ref shardRef, s **Shard, st Step, now time.Time) outcome {
	name := ref.Namespace + "/" + ref.Name
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if p.nodeUID == "" {
		uid, err := p.api.NodeUID(ctx)
		if err != nil {
			p.fail("node", name, fmt.Errorf("read Node %s (the shards' owner): %w", p.opts.Node, err))
			p.backOff(ref, now)
			return failed
		}
		p.ok("node")
		p.nodeUID = uid
	}
	rv := (*s).RV
	lines := withSeqs(st, *s, p.opts.Node)
	value := entry.FormatValue(lines)
	got, err := p.api.Write(ctx, ref.Namespace, ref.Name, rv, p.nodeUID, (*s).staleOwners(p.opts.Node, p.nodeUID), value)
	if err != nil {
		delete(p.shards, ref) // read it again before the next write
		return p.refusedWrite(ref, st, err, now)
	}
	p.ok("apply")
	p.shards[ref] = view{shard: got, at: now}
	*s = got
	p.writes.WithLabelValues(st.Kind).Inc()
	if err := p.written.mark(ref, len(lines) > 0); err != nil {
		p.fail("written", name, err)
	}
	args := []any{"shard", name, "entries", len(lines)}
	if st.Claim != "" {
		i := slices.IndexFunc(lines, func(l Line) bool { return l.Identity == st.Claim })
		args = append(args, "identity", ref.Namespace+"/"+st.Claim, "pod", lines[i].Pod, "ips", lines[i].IPs, "seq", lines[i].Seq)
	}
	p.opts.Log.Info("placement "+st.Kind+" written", args...)
	return made
}

// refusedWrite sorts a failed write: the index policy's verdict on a claim
// is final for that pod and ADD; a write on a shard changed meanwhile is
// made again at once; anything else (RBAC not applied yet, the API server
// away, a full shard) is tried again after a growing wait.
func (p *Publisher) refusedWrite(ref shardRef, st Step, err error, now time.Time) outcome {
	name := ref.Namespace + "/" + ref.Name
	msg := err.Error()
	switch {
	case st.Claim != "" && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(msg, "claim refused:"):
		i := slices.IndexFunc(st.Lines, func(l Line) bool { return l.Identity == st.Claim })
		l := st.Lines[i]
		p.refused[refusal{Key{ref.Namespace, st.Claim}, l.Pod, l.Since}] = true
		p.errs.WithLabelValues("refused").Inc()
		p.opts.Log.Warn("placement claim refused by the index policy; not tried again for this pod and ADD",
			"identity", ref.Namespace+"/"+st.Claim, "pod", l.Pod, "shard", name, "err", msg)
		return failed
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || strings.Contains(msg, "stale claim:"):
		return stale
	}
	p.fail("apply", name, err)
	p.backOff(ref, now)
	return failed
}

// backOff makes ref wait before its next write: Interval, doubled with each
// failure in a row, at most MaxBackoff.
func (p *Publisher) backOff(ref shardRef, now time.Time) {
	b := p.retry[ref]
	b.failures++
	wait := p.opts.Interval << min(b.failures-1, 16)
	b.next = now.Add(min(wait, p.opts.MaxBackoff))
	p.retry[ref] = b
}

// withSeqs returns the lines of st as written on shard s: the claim's Seq
// is the shard's resourceVersion, every other line keeps the Seq of its
// claim as the node wrote it there (an earlier step of the same pass may
// have written it).
func withSeqs(st Step, s *Shard, node string) []Line {
	cur, _ := s.Lines(node)
	lines := slices.Clone(st.Lines)
	for i, l := range lines {
		if l.Identity == st.Claim {
			lines[i].Seq = seqOf(s.RV)
		} else if j := slices.IndexFunc(cur, l.SameClaim); j >= 0 {
			lines[i].Seq = cur[j].Seq
		}
	}
	return lines
}

// seqOf is the Seq of a claim written on resourceVersion rv: 0 for a shard
// the claim creates.
func seqOf(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 63)
	return n
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

// fit returns want without the entries that would make the node's value
// longer than entry.MaxValueLen: running pods' first, then the latest
// reservations. What is left out is counted and logged.
func (p *Publisher) fit(ref shardRef, want map[string]Line) map[string]Line {
	ids := slices.SortedFunc(maps.Keys(want), func(a, b string) int {
		la, lb := want[a], want[b]
		if la.Running() != lb.Running() {
			if la.Running() {
				return -1
			}
			return 1
		}
		return lb.Since.Compare(la.Since)
	})
	out := map[string]Line{}
	size := -1
	for _, id := range ids {
		l := want[id]
		l.Seq = 1<<63 - 1 // the longest a seq can be
		if size+1+len(l.String()) > entry.MaxValueLen {
			p.fail("full", ref.Namespace+"/"+ref.Name, fmt.Errorf("%d of the node's %d entries fit in one shard (%d characters); the others are not published",
				len(out), len(want), entry.MaxValueLen))
			return out
		}
		size += 1 + len(l.String())
		out[id] = want[id]
	}
	return out
}

// laterNode names the node that claimed id after node in s.
func laterNode(s *Shard, node, id string) string {
	var best string
	var seq uint64
	for n, l := range s.Others(node, id) {
		if best == "" || l.Seq > seq {
			best, seq = n, l.Seq
		}
	}
	return best
}

// noteBadEntries counts and logs the node's own entries in s that cannot be
// read (the next write drops them); other nodes' are theirs to mend.
func (p *Publisher) noteBadEntries(name string, s *Shard) {
	if _, bad := s.Lines(p.opts.Node); len(bad) > 0 {
		p.errs.WithLabelValues("entry").Add(float64(len(bad)))
		p.opts.Log.Warn("placement: own entries that cannot be read are dropped", "shard", name, "bad", len(bad), "first", bad[0].Error())
	}
}

// noteLost logs each identity another node claimed later, once.
func (p *Publisher) noteLost(now map[Key]string) {
	for k, n := range now {
		if p.lost[k] != n {
			p.opts.Log.Info("identity claimed later by another node (it ran the pod since); the placement hint names that node",
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
	if step == "apply" && apierrors.IsForbidden(err) && (strings.Contains(msg, "cannot patch") || strings.Contains(msg, "cannot create")) {
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
	p.opts.Log.Warn("placement step failed; retried", "step", step, "what", what, "err", msg)
}

// ok forgets a step's last failure, so the next one is logged.
func (p *Publisher) ok(step string) {
	p.mu.Lock()
	delete(p.logged, step)
	p.mu.Unlock()
}
