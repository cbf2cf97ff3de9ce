package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/checkpointd/safefile"
	"github.com/stickyip/stickyip/reservation"
)

type fakeStore struct {
	mu      sync.Mutex
	entries []reservation.Entry
	err     error
}

func (s *fakeStore) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]reservation.Entry(nil), s.entries...), s.err
}

func (s *fakeStore) set(es ...reservation.Entry) { s.mu.Lock(); s.entries = es; s.mu.Unlock() }

type rig struct {
	t     *testing.T
	api   *fakeAPI
	store *fakeStore
	now   time.Time
	reg   *prometheus.Registry
	logs  *bytes.Buffer
	file  string
	p     *Publisher
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, api: newFakeAPI(), store: &fakeStore{}, now: t0, file: filepath.Join(t.TempDir(), WrittenFileName)}
	r.start()
	return r
}

// start (re)starts node1's publisher: a new process with the same files.
func (r *rig) start() {
	r.reg, r.logs = prometheus.NewRegistry(), &bytes.Buffer{}
	r.p = NewWithAPI(r.api.as("node1"), Options{Node: "node1", Store: r.store, WrittenFile: r.file, Registry: r.reg,
		Log: slog.New(slog.NewTextHandler(r.logs, nil)), Now: func() time.Time { return r.now }})
}

func (r *rig) pass() { r.t.Helper(); r.p.Pass(context.Background()) }

func (r *rig) writes(kind string) int {
	return int(testutil.ToFloat64(r.p.writes.WithLabelValues(kind)))
}

func (r *rig) errors(step string) int { return int(testutil.ToFloat64(r.p.errs.WithLabelValues(step))) }

func allocated(ip, ns, id, pod string, at time.Time) reservation.Entry {
	return rec(ip, reservation.Allocated, ns, id, pod, 10*time.Minute, at, time.Time{})
}

func reservedAt(ip, ns, id, pod string, at, expires time.Time) reservation.Entry {
	e := rec(ip, reservation.Reserved, ns, id, pod, 10*time.Minute, at, expires)
	e.ContainerID = ""
	return e
}

// A sticky pod's lifecycle is three writes at most (its ADD's claim, its
// reservation's end at DEL, the release at expiry), a plain pod's none,
// and passes in between write nothing.
func TestPublisherLifecycle(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	plain := rec("10.244.1.9", reservation.Allocated, "db", "plain", "plain", 0, t0, time.Time{})
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), plain)
	r.pass()
	r.pass()
	l, ok := r.api.line("db", "db-0", "node1")
	if !ok || l.Pod != "db-0" || !l.Since.Equal(t0) || !l.Running() || !r.api.owned("db", "db-0", "node1") || r.api.hint("db", "db-0") != "node1" {
		t.Fatalf("after ADD: %+v %v, owned %v", l, ok, r.api.owned("db", "db-0", "node1"))
	}
	if _, ok := r.api.line("db", "plain", "node1"); ok {
		t.Error("a pod without a reservation duration has an entry")
	}
	r.now = t0.Add(time.Minute)
	expires := r.now.Add(10 * time.Minute)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, expires))
	r.pass()
	r.pass()
	if l2, ok := r.api.line("db", "db-0", "node1"); !ok || !l2.Until.Equal(expires) || l2.Seq != l.Seq || r.api.writes != 2 {
		t.Fatalf("after DEL: %+v %v, %d writes; want the same claim with its end, one more write", l2, ok, r.api.writes)
	}
	r.now = r.now.Add(11 * time.Minute)
	r.pass()
	r.pass()
	if l, ok := r.api.line("db", "db-0", "node1"); ok || r.api.owned("db", "db-0", "node1") {
		t.Fatalf("after expiry: %+v, owned %v", l, r.api.owned("db", "db-0", "node1"))
	}
	if c, u, rel := r.writes(WriteClaim), r.writes(WriteUpdate), r.writes(WriteRelease); c != 1 || u != 1 || rel != 1 || r.api.writes != 3 {
		t.Errorf("writes: claim %d update %d release %d (API %d), want 1 1 1", c, u, rel, r.api.writes)
	}
	if n := testutil.ToFloat64(r.p.records); n != 0 {
		t.Errorf("records gauge %v after expiry", n)
	}
}

// After a restart, the shards the node wrote to are visited again even when
// the store no longer holds anything there (the reservation ended while
// checkpointd was down): the file of written shards is what tells.
func TestPublisherRestartReleasesWhatEndedMeanwhile(t *testing.T) {
	for _, keepFile := range []bool{true, false} {
		t.Run(fmt.Sprint("file kept ", keepFile), func(t *testing.T) {
			r := newRig(t)
			if !keepFile {
				r.file = ""
				r.start()
			}
			r.api.bound["db/db-0"] = "node1"
			r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t0.Add(10*time.Minute)))
			r.pass()
			if _, ok := r.api.line("db", "db-0", "node1"); !ok {
				t.Fatal("not published")
			}
			r.now = t0.Add(time.Hour)
			r.store.set()
			r.start()
			r.pass()
			_, ok := r.api.line("db", "db-0", "node1")
			if keepFile == ok {
				t.Errorf("restarted publisher, written file kept %v: entry still there %v", keepFile, ok)
			}
		})
	}
}

// A claim the index policy refuses (the pod is not bound to this node: it
// was deleted before the node could publish, or moved) is made once, not
// every pass; a new ADD of the identity is claimed again.
func TestPublisherRefusedClaimNotRetried(t *testing.T) {
	r := newRig(t)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t0.Add(10*time.Minute)))
	for range 5 {
		r.pass()
		r.now = r.now.Add(10 * time.Second)
	}
	if r.errors("refused") != 1 || r.api.writes != 0 {
		t.Fatalf("refused claims %d, writes %d: want one attempt", r.errors("refused"), r.api.writes)
	}
	if !strings.Contains(r.logs.String(), "claim refused") {
		t.Errorf("refusal not logged:\n%s", r.logs)
	}
	r.api.bound["db/db-0"] = "node1"
	r.now = t0.Add(time.Minute)
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", r.now))
	r.pass()
	if l, ok := r.api.line("db", "db-0", "node1"); !ok || !l.Since.Equal(r.now) {
		t.Errorf("after a new ADD: %+v %v, want claimed", l, ok)
	}
}

// A write refused for any other reason (the manifests not applied yet, a
// policy that cannot be evaluated, a full object) is tried again, after
// Interval, then twice as long each time, at most MaxBackoff, each wait
// longer by up to half again at random; then it is made (issue 31: a
// refused claim was never tried again).
func TestPublisherRetriesWithBackoff(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	refusing := &refusingAPI{API: r.api.as("node1"), left: 4}
	r.p.api = refusing
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	const step = 250 * time.Millisecond
	var tried []time.Duration
	for range 800 { // passes 250 ms apart
		before := refusing.calls
		r.pass()
		if refusing.calls > before {
			tried = append(tried, r.now.Sub(t0))
		}
		r.now = r.now.Add(step)
	}
	if len(tried) != 5 {
		t.Fatalf("writes tried at %v, want 5 (4 refused, then made)", tried)
	}
	for i, base := 1, 5*time.Second; i < len(tried); i, base = i+1, 2*base {
		if wait := tried[i] - tried[i-1]; wait < base || wait > base+base/2+step {
			t.Errorf("wait %d: %v, want %v to %v (Interval doubled, plus up to half at random); tried at %v", i, wait, base, base+base/2, tried)
		}
	}
	if _, ok := r.api.line("db", "db-0", "node1"); !ok || r.errors("refused") != 0 || r.errors("apply") != 4 {
		t.Errorf("claim made %v, refused %d, apply errors %d; want made after 4 failures", ok, r.errors("refused"), r.errors("apply"))
	}
}

// After an API server outage, the nodes whose writes failed together come
// back apart: each node's wait is its own, at random, so they do not all
// retry the same shards at the same instant (they did: every wait was
// Interval, doubled, for every node alike).
func TestPublisherRetriesSpreadAfterOutage(t *testing.T) {
	api := newFakeAPI()
	const nodes = 8
	var pubs []*Publisher
	now := t0
	for i := range nodes {
		node := fmt.Sprintf("node%d", i)
		api.bound[fmt.Sprintf("db/db-%d", i)] = node
		st := &fakeStore{}
		st.set(allocated(fmt.Sprintf("10.244.%d.5", i), "db", fmt.Sprintf("db-%d", i), fmt.Sprintf("db-%d", i), t0))
		pubs = append(pubs, NewWithAPI(api.as(node), Options{Node: node, Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Now: func() time.Time { return now }}))
	}
	api.down = true
	for _, p := range pubs {
		p.Pass(context.Background())
	}
	api.down = false
	back := map[int]time.Duration{} // node → when it wrote again
	for now.Sub(t0) < 10*time.Second {
		now = now.Add(50 * time.Millisecond)
		for i, p := range pubs {
			if _, done := back[i]; done {
				continue
			}
			p.Pass(context.Background())
			if _, ok := api.line("db", fmt.Sprintf("db-%d", i), fmt.Sprintf("node%d", i)); ok {
				back[i] = now.Sub(t0)
			}
		}
	}
	distinct := map[time.Duration]bool{}
	for i := range nodes {
		at, ok := back[i]
		if !ok || at < 5*time.Second || at > 7500*time.Millisecond+50*time.Millisecond {
			t.Errorf("node%d wrote again at %v (%v), want between Interval and half again after it", i, at, ok)
		}
		distinct[at] = true
	}
	if len(distinct) < nodes/2 {
		t.Errorf("the %d nodes wrote again at only %d distinct instants (%v): in lockstep", nodes, len(distinct), back)
	}
}

// refusingAPI refuses the first left writes as RBAC would before
// deploy/placement is applied.
type refusingAPI struct {
	API
	left, calls int
}

func (a *refusingAPI) Write(ctx context.Context, ns, name string, c Change) (*Shard, error) {
	a.calls++
	if a.left > 0 {
		a.left--
		return nil, apierrors.NewForbidden(gr, name, errors.New(`User "system:node:node1" cannot patch resource "configmaps"`))
	}
	return a.API.Write(ctx, ns, name, c)
}

// The node that claimed the identity last is the one the hint names: a
// reservation here of an older ADD does not claim it again, the pod
// running here again does; a claim is never made on a stale view.
func TestPublisherTie(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	// The pod moves to node2, which claims it.
	t1 := t0.Add(time.Minute)
	r.api.bound["db/db-0"] = "node2"
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t1.Add(10*time.Minute)))
	claimAs(t, r.api, "node2", "db", Line{Identity: "db-0", Pod: "db-0", Since: t1, IPs: []string{"10.244.2.7"}})
	r.now = t1.Add(time.Second)
	r.pass()
	r.pass()
	if got := r.api.hint("db", "db-0"); got != "node2" {
		t.Fatalf("node1's older reservation: the hint names %s, want node2", got)
	}
	if n := testutil.ToFloat64(r.p.superseded); n != 1 {
		t.Errorf("superseded gauge %v, want 1", n)
	}
	if strings.Count(r.logs.String(), "claimed later by another node") != 1 {
		t.Errorf("want the superseded identity logged once:\n%s", r.logs)
	}
	// The pod comes back to node1.
	r.api.bound["db/db-0"] = "node1"
	r.now = t1.Add(time.Minute)
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", r.now))
	r.pass()
	if got := r.api.hint("db", "db-0"); got != "node1" {
		t.Fatalf("node1 running the pod again: the hint names %s, want node1", got)
	}
	if n := testutil.ToFloat64(r.p.superseded); n != 0 {
		t.Errorf("superseded gauge %v after the new claim, want 0", n)
	}
}

// claimAs writes node's claim of l in its shard, as node's publisher would
// on the shard as it is now.
func claimAs(t *testing.T, f *fakeAPI, node, ns string, l Line) {
	t.Helper()
	ctx := context.Background()
	api := f.as(node)
	s, err := api.Get(ctx, ns, ShardOf(l.Identity))
	if err != nil {
		t.Fatal(err)
	}
	l.Seq = s.ClaimSeq()
	lines, _ := s.Lines(node)
	lines = slices.DeleteFunc(lines, func(o Line) bool { return o.Identity == l.Identity })
	if _, err := api.Write(ctx, ns, ShardOf(l.Identity), Change{Value: entry.FormatValue(append(lines, l)), UID: f.uid(node)}); err != nil {
		t.Fatal(err)
	}
}

// sameShard returns n identities prefix-<i> that fall into shard.
func sameShard(prefix, shard string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

// Many nodes writing one shard do not conflict: another node's write
// between this node's two writes costs it neither a read nor a retry
// (issue 38: every concurrent writer but one met 409 Conflict).
func TestPublisherConcurrentWritersDoNotConflict(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	for _, id := range sameShard("web", ShardOf("db-0"), 3) {
		r.api.bound["db/"+id] = "node2"
		claimAs(t, r.api, "node2", "db", Line{Identity: id, Pod: id, Since: t0, IPs: []string{"10.244.2.6"}})
	}
	gets, tries := r.api.gets, r.api.tries
	r.now = t0.Add(time.Minute)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, r.now.Add(time.Hour)))
	r.pass()
	if l, _ := r.api.line("db", "db-0", "node1"); l.Until.IsZero() {
		t.Fatalf("node1's DEL not written: %+v", l)
	}
	if r.api.gets != gets || r.api.tries != tries+1 || r.errors("apply") != 0 {
		t.Errorf("node1's DEL took %d reads and %d writes (apply errors %d), want 0 and 1", r.api.gets-gets, r.api.tries-tries, r.errors("apply"))
	}
}

// Identities started together in one shard are claimed MaxClaims per
// write, with no read: a full node's new pods land in a few writes.
func TestPublisherClaimsBatched(t *testing.T) {
	r := newRig(t)
	var es []reservation.Entry
	for i, id := range sameShard("db", ShardOf("db-0"), 2*MaxClaims+6) {
		r.api.bound["db/"+id] = "node1"
		es = append(es, allocated(fmt.Sprintf("10.244.1.%d", 10+i), "db", id, id, t0))
	}
	r.store.set(es...)
	r.pass()
	if r.writes(WriteClaim) != 3 || r.api.tries != 3 || r.api.gets != 0 || r.errors("refused") != 0 {
		t.Fatalf("%d claims: %d claim writes (%d tried), %d reads, %d refused; want 3 writes, no read", len(es),
			r.writes(WriteClaim), r.api.tries, r.api.gets, r.errors("refused"))
	}
	for _, e := range es {
		if _, ok := r.api.line("db", e.Identity.Name, "node1"); !ok {
			t.Errorf("%s not published", e.Identity.Name)
		}
	}
}

// A refused claim in a batch is named by the refusal: the others are
// written at once without it, and it is not tried again.
func TestPublisherRefusedClaimInBatch(t *testing.T) {
	r := newRig(t)
	ids := sameShard("db", ShardOf("db-0"), 3)
	var es []reservation.Entry
	for i, id := range ids {
		if i != 1 {
			r.api.bound["db/"+id] = "node1"
		}
		es = append(es, allocated(fmt.Sprintf("10.244.1.%d", 10+i), "db", id, id, t0))
	}
	r.store.set(es...)
	r.pass()
	r.pass()
	if r.errors("refused") != 1 || r.api.tries != 2 || r.api.writes != 1 {
		t.Fatalf("refused %d, writes %d of %d tried: want the refused claim named and the others made in the next write", r.errors("refused"), r.api.writes, r.api.tries)
	}
	for i, id := range ids {
		if _, ok := r.api.line("db", id, "node1"); ok == (i == 1) {
			t.Errorf("%s published %v", id, ok)
		}
	}
}

// A claim made on a view older than another node's claim of the identity
// is refused as stale: the shard is read once and the claim made again,
// later than the other.
func TestPublisherStaleViewClaimsAgain(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	r.api.bound["db/db-0"] = "node2" // it moves to node2, which claims it
	claimAs(t, r.api, "node2", "db", Line{Identity: "db-0", Pod: "db-0", Since: t0.Add(time.Minute), IPs: []string{"10.244.2.7"}})
	r.api.bound["db/db-0"] = "node1" // and back to node1, before node1 read the shard again
	r.now = t0.Add(2 * time.Minute)
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", r.now))
	gets := r.api.gets
	r.pass()
	if got := r.api.hint("db", "db-0"); got != "node1" {
		t.Fatalf("the hint names %s, want node1, which ran the pod last", got)
	}
	if r.api.gets != gets+1 || r.errors("apply") != 0 {
		t.Errorf("%d reads, %d apply errors: want one read, no error", r.api.gets-gets, r.errors("apply"))
	}
}

// A node's entries beyond what one value may hold are left out, the
// oldest reservations first, and counted: the shard stays writable.
func TestPublisherBoundedValue(t *testing.T) {
	r := newRig(t)
	var es []reservation.Entry
	shard := ShardOf("db-0")
	n := 0
	for i := 0; n < 300; i++ {
		id := fmt.Sprintf("db-%d", i)
		if ShardOf(id) != shard {
			continue
		}
		r.api.bound["db/"+id] = "node1"
		at := t0.Add(time.Duration(n) * time.Second)
		es = append(es, reservedAt(fmt.Sprintf("10.244.%d.%d", n/200, 10+n%200), "db", id, id, at, t0.Add(time.Hour)))
		n++
	}
	r.store.set(es...)
	r.now = t0.Add(10 * time.Minute)
	for range 3 {
		r.pass()
	}
	s := r.api.view(shardRef{"db", shard})
	lines, bad := s.Lines("node1")
	if len(bad) > 0 || len(lines) == 0 || len(lines) == 300 || len(s.Values["node1"]) > entry.MaxValueLen {
		t.Fatalf("%d entries of 300 in %d characters (bad %v); want as many as fit in %d", len(lines), len(s.Values["node1"]), bad, entry.MaxValueLen)
	}
	if _, ok := r.api.line("db", es[299].Identity.Name, "node1"); !ok {
		t.Error("the latest reservation was left out")
	}
	if r.errors("full") == 0 {
		t.Error("the entries left out are not counted")
	}
}

// With the API server away nothing on the node waits or breaks: each failure
// kind is logged once, counted every pass, and the shards catch up when the
// server returns.
func TestPublisherAPIAway(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.api.down = true
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	for range 4 {
		r.pass()
		r.now = r.now.Add(time.Minute) // past the wait before the next try
	}
	if r.errors("node") != 4 || strings.Count(r.logs.String(), "placement step failed") != 1 {
		t.Fatalf("errors reading the Node %d, logged:\n%s\nwant 4 counted, 1 logged", r.errors("node"), r.logs)
	}
	r.api.down = false
	r.pass()
	if _, ok := r.api.line("db", "db-0", "node1"); !ok {
		t.Error("not published once the API server is back")
	}
}

// An address outside the node's current pod ranges is never published, and
// an entry left with none is released.
func TestPublisherInRange(t *testing.T) {
	r := newRig(t)
	cur := netip.MustParsePrefix("10.244.1.0/24")
	r.p.opts.Holds = func() (func(reservation.Entry) bool, error) {
		return func(e reservation.Entry) bool { return cur.Contains(e.IP) }, nil
	}
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	if _, ok := r.api.line("db", "db-0", "node1"); !ok {
		t.Fatal("not published")
	}
	cur = netip.MustParsePrefix("10.244.3.0/24") // the node came back with another podCIDR
	r.pass()
	if l, ok := r.api.line("db", "db-0", "node1"); ok {
		t.Errorf("entry of an address outside the node's range still published: %+v", l)
	}
}

// The Node's UID is read once per pass that writes, not before every write
// (and not at all in a pass that writes nothing): a Node registered again
// (new UID) owns the shards written after.
func TestPublisherReadsNodeOncePerPass(t *testing.T) {
	r := newRig(t)
	calls := 0
	api := r.api.as("node1")
	r.p.api = countingAPI{api, &calls}
	var es []reservation.Entry
	for i := range 3 {
		id := fmt.Sprintf("p%d", i)
		r.api.bound["db/"+id] = "node1"
		es = append(es, allocated(fmt.Sprintf("10.244.1.%d", 10+i), "db", id, id, t0))
	}
	r.store.set(es...)
	r.pass()
	r.pass()
	if calls != 1 || r.writes(WriteClaim) != 3 {
		t.Errorf("Node read %d times for 3 claims in one pass and a pass without writes, want 1", calls)
	}
}

type countingAPI struct {
	API
	calls *int
}

func (c countingAPI) NodeUID(ctx context.Context) (types.UID, error) {
	*c.calls++
	return c.API.NodeUID(ctx)
}

// A Node deleted and registered again has a new UID: the garbage collector
// drops the owner reference to the old one, and the next pass owns the
// shard again with the new one.
func TestPublisherNodeRegisteredAgain(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	ref := shardRef{"db", ShardOf("db-0")}
	if got := r.api.owner("db", "db-0", "node1"); got != "uid-node1" {
		t.Fatalf("owner %q", got)
	}
	r.api.uids = map[string]types.UID{"node1": "uid-node1-again"}
	s := r.api.shards[ref] // the garbage collector drops the reference to the old Node
	s.refs = nil
	r.api.rv++
	s.rv = r.api.rv
	r.now = r.now.Add(6 * time.Minute) // the shard is read again
	r.pass()
	if got := r.api.owner("db", "db-0", "node1"); got != "uid-node1-again" {
		t.Errorf("after the Node was registered again: owner %q, want uid-node1-again", got)
	}
}

// ReadOwn gives back the node's entries as the index has them, its
// reservations' ends included: what a store rebuilt after damage needs.
func TestReadOwn(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.api.bound["web/web-0"] = "node1"
	end := t0.Add(time.Hour)
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), reservedAt("10.244.1.6", "web", "web-0", "web-0", t0, end))
	r.pass()
	r.start() // a new process: the shards come from the file of written shards
	own, err := r.p.ReadOwn(context.Background(), nil)
	if err != nil || len(own) != 2 {
		t.Fatalf("ReadOwn: %+v, %v", own, err)
	}
	if own[0].Namespace != "db" || own[0].Identity != "db-0" || !own[0].Running() ||
		own[1].Namespace != "web" || own[1].Identity != "web-0" || !own[1].Until.Equal(end) || own[1].IPs[0] != "10.244.1.6" {
		t.Errorf("ReadOwn: %+v", own)
	}
	r.api.down = true
	if _, err := r.p.ReadOwn(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "placement shard") {
		t.Errorf("ReadOwn with the API server away: %v, want an error naming the shard", err)
	}
}

// A damaged file of written shards is reported and replaced, never
// trusted; the former index's file (v1) is an empty set.
func TestWrittenFileDamaged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, WrittenFileName)
	w, err := loadWritten(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.mark(shardRef{"db", ShardName(5)}, true); err != nil {
		t.Fatal(err)
	}
	w2, err := loadWritten(p)
	if err != nil || !w2.set[shardRef{"db", ShardName(5)}] {
		t.Fatalf("reloaded: %v %v", w2.set, err)
	}
	if err := writeFile(p, []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	w3, err := loadWritten(p)
	if err == nil || len(w3.set) != 0 {
		t.Errorf("damaged file: %v, set %v; want an error and an empty set", err, w3.set)
	}
	if err := writeFile(p, safefile.Frame(writtenFormatV1, []byte(`[{"Namespace":"db","Name":"stickyip-placement-5"}]`))); err != nil {
		t.Fatal(err)
	}
	if w4, err := loadWritten(p); err != nil || len(w4.set) != 0 {
		t.Errorf("v1 file: %v, set %v; want no error and an empty set", err, w4.set)
	}
}

func writeFile(p string, data []byte) error { return os.WriteFile(p, data, 0o600) }

// A network whose config cannot be read publishes nothing, and says so; the
// other networks publish.
func TestPublisherNetworkWithoutConfig(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.api.bound["db/web"] = "node1"
	other := allocated("10.99.0.5", "db", "web", "web", t0)
	other.Network = "broken"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), other)
	r.p.opts.Holds = func() (func(reservation.Entry) bool, error) {
		return func(e reservation.Entry) bool { return e.Network == "cbr0" }, errors.New("no stickyip config for the network: network broken")
	}
	r.pass()
	if _, ok := r.api.line("db", "db-0", "node1"); !ok {
		t.Error("cbr0's identity not published")
	}
	if l, ok := r.api.line("db", "web", "node1"); ok {
		t.Errorf("the network without config published %+v", l)
	}
	if !strings.Contains(r.logs.String(), "network broken") || r.errors("ranges") != 1 {
		t.Errorf("the network without config not reported (errors %d):\n%s", r.errors("ranges"), r.logs)
	}
}

// A pass that wants what the last one left in place (every shard settled,
// nothing failed or refused) does nothing — no read, no plan, no write —
// until a shard seen is due for a read (Resync) or the store changes: an
// idle node's publisher ran its plan on every shard every pass.
func TestPublisherIdlePassDoesNothing(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	if _, ok := r.api.line("db", "db-0", "node1"); !ok {
		t.Fatal("not published")
	}
	gets, tries, visits := r.api.gets, r.api.tries, r.p.visits
	for range 10 {
		r.now = r.now.Add(5 * time.Second)
		r.pass()
	}
	if r.api.gets != gets || r.api.tries != tries || r.p.visits != visits {
		t.Errorf("10 idle passes: %d reads, %d writes tried, %d shards compared with the store, want none", r.api.gets-gets, r.api.tries-tries, r.p.visits-visits)
	}
	r.now = r.now.Add(r.p.opts.Resync)
	r.pass()
	if r.api.gets != gets+1 {
		t.Errorf("a pass past Resync read %d shards, want the one seen", r.api.gets-gets)
	}
	r.now = r.now.Add(time.Minute)
	expires := r.now.Add(10 * time.Minute)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, expires))
	r.pass()
	if l, ok := r.api.line("db", "db-0", "node1"); !ok || !l.Until.Equal(expires) {
		t.Errorf("after DEL: %+v %v, want its reservation's end published", l, ok)
	}
}
