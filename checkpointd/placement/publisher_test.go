package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/reservation"
)

// fakeAPI is the API server as the publisher sees it: shards written by
// server-side apply, one field manager per node, with the writer policy's
// rules on claims (one per write, only for a pod bound to the writer).
type fakeAPI struct {
	mu     sync.Mutex
	shards map[shardRef]*fakeShard
	bound  map[string]string    // namespace/pod → node
	uids   map[string]types.UID // node → its Node's UID (default uid-<node>)
	down   bool
	gets   int
	writes int
}

type fakeShard struct {
	holds  map[string]Hold
	owner  map[string]string // identity → the node whose manager owns its entry
	owners map[string]types.UID
}

var errDown = errors.New("connection refused")

func newFakeAPI() *fakeAPI {
	return &fakeAPI{shards: map[shardRef]*fakeShard{}, bound: map[string]string{}}
}

// as returns the fake as node's API.
func (f *fakeAPI) as(node string) API { return &fakeNodeAPI{f, node} }

type fakeNodeAPI struct {
	f    *fakeAPI
	node string
}

func (a *fakeNodeAPI) NodeUID(context.Context) (types.UID, error) {
	if a.f.down {
		return "", errDown
	}
	if uid, ok := a.f.uids[a.node]; ok {
		return uid, nil
	}
	return types.UID("uid-" + a.node), nil
}

func (a *fakeNodeAPI) Get(_ context.Context, ns, name string) (*Shard, error) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	f.gets++
	return f.view(shardRef{ns, name}), nil
}

func (f *fakeAPI) view(ref shardRef) *Shard {
	s := f.shards[ref]
	if s == nil {
		return &Shard{Holds: map[string]Hold{}}
	}
	v := &Shard{Exists: true, Holds: maps.Clone(s.holds)}
	for n := range s.owners {
		v.Owners = append(v.Owners, n)
	}
	return v
}

func (a *fakeNodeAPI) Apply(_ context.Context, ns, name string, uid types.UID, mine map[string]Hold, force bool) (*Shard, error) {
	f := a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	gr := schema.GroupResource{Resource: "configmaps"}
	ref := shardRef{ns, name}
	s := f.shards[ref]
	if s == nil {
		s = &fakeShard{holds: map[string]Hold{}, owner: map[string]string{}, owners: map[string]types.UID{}}
	}
	claims := 0
	for id, h := range mine {
		if h.Node != a.node {
			return nil, apierrors.NewForbidden(gr, name, fmt.Errorf("entry %s names %s", id, h.Node))
		}
		cur, held := s.holds[id]
		if held && s.owner[id] != a.node && !cur.Equal(h) && !force {
			return nil, apierrors.NewConflict(gr, name, fmt.Errorf("spec.holds.%s is owned by %s", id, s.owner[id]))
		}
		if !held || cur.Node != a.node || cur.Pod != h.Pod {
			claims++
			if f.bound[ns+"/"+h.Pod] != a.node {
				return nil, apierrors.NewForbidden(gr, name, fmt.Errorf("pod %s is not bound to %s", h.Pod, a.node))
			}
		}
	}
	if claims > 1 {
		return nil, apierrors.NewForbidden(gr, name, fmt.Errorf("%d claims in one write", claims))
	}
	for id, o := range s.owner {
		if _, keep := mine[id]; o == a.node && !keep {
			delete(s.holds, id)
			delete(s.owner, id)
		}
	}
	for id, h := range mine {
		s.holds[id], s.owner[id] = h, a.node
	}
	if len(mine) > 0 {
		s.owners[a.node] = uid
	} else {
		delete(s.owners, a.node)
	}
	f.shards[ref] = s
	f.writes++
	return f.view(ref), nil
}

func (f *fakeAPI) hold(ns, id string) (Hold, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shards[shardRef{ns, ShardOf(id)}]
	if s == nil {
		return Hold{}, false
	}
	h, ok := s.holds[id]
	return h, ok
}

func (f *fakeAPI) owned(ns, id, node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.shards[shardRef{ns, ShardOf(id)}]
	return s != nil && s.owners[node] != ""
}

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

// A sticky pod's lifecycle is two writes (its ADD's claim, the release at
// expiry), its DEL none, a plain pod's none, and passes in between write
// nothing.
func TestPublisherLifecycle(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	plain := rec("10.244.1.9", reservation.Allocated, "db", "plain", "plain", 0, t0, time.Time{})
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), plain)
	r.pass()
	r.pass()
	h, ok := r.api.hold("db", "db-0")
	if !ok || h.Node != "node1" || h.Pod != "db-0" || !h.Since.Equal(t0) || !r.api.owned("db", "db-0", "node1") {
		t.Fatalf("after ADD: %+v %v, owned %v", h, ok, r.api.owned("db", "db-0", "node1"))
	}
	if _, ok := r.api.hold("db", "plain"); ok {
		t.Error("a pod without a reservation duration has an entry")
	}
	r.now = t0.Add(time.Minute)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, r.now.Add(10*time.Minute)))
	r.pass()
	r.pass()
	if h, ok := r.api.hold("db", "db-0"); !ok || r.api.writes != 1 {
		t.Fatalf("after DEL: %+v %v, %d writes; want the entry as it was, no write", h, ok, r.api.writes)
	}
	r.now = r.now.Add(11 * time.Minute)
	r.pass()
	r.pass()
	if h, ok := r.api.hold("db", "db-0"); ok || r.api.owned("db", "db-0", "node1") {
		t.Fatalf("after expiry: %+v, owned %v", h, r.api.owned("db", "db-0", "node1"))
	}
	if c, u, rel := r.writes(WriteClaim), r.writes(WriteUpdate), r.writes(WriteRelease); c != 1 || u != 0 || rel != 1 || r.api.writes != 2 {
		t.Errorf("writes: claim %d update %d release %d (API %d), want 1 0 1", c, u, rel, r.api.writes)
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
			if _, ok := r.api.hold("db", "db-0"); !ok {
				t.Fatal("not published")
			}
			r.now = t0.Add(time.Hour)
			r.store.set()
			r.start()
			r.pass()
			_, ok := r.api.hold("db", "db-0")
			if keepFile == ok {
				t.Errorf("restarted publisher, written file kept %v: entry still there %v", keepFile, ok)
			}
		})
	}
}

// A claim the API server refuses (the pod is not bound to this node: it was
// deleted before the node could publish, or moved) is made once, not every
// pass; a new ADD of the identity is claimed again.
func TestPublisherRefusedClaimNotRetried(t *testing.T) {
	r := newRig(t)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t0.Add(10*time.Minute)))
	for range 5 {
		r.pass()
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
	if h, ok := r.api.hold("db", "db-0"); !ok || !h.Since.Equal(r.now) {
		t.Errorf("after a new ADD: %+v %v, want claimed", h, ok)
	}
}

// The node that ran the pod last holds the identity: node1's reservation
// does not take over node2's newer claim, node1's newer allocation does.
func TestPublisherTie(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node2"
	t1 := t0.Add(time.Minute)
	if _, err := r.api.as("node2").Apply(context.Background(), "db", ShardOf("db-0"), "uid-node2",
		map[string]Hold{"db-0": {Node: "node2", Pod: "db-0", IPs: []string{"10.244.2.7"}, Since: t1}}, false); err != nil {
		t.Fatal(err)
	}
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t1.Add(10*time.Minute)))
	r.now = t1.Add(time.Second)
	r.pass()
	r.pass()
	if h, _ := r.api.hold("db", "db-0"); h.Node != "node2" || r.api.writes != 1 {
		t.Fatalf("node1's older reservation: entry %+v, writes %d; want node2's, untouched", h, r.api.writes)
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
	if h, _ := r.api.hold("db", "db-0"); h.Node != "node1" || !h.Since.Equal(r.now) {
		t.Fatalf("node1 running the pod again: entry %+v, want node1's", h)
	}
	if n := testutil.ToFloat64(r.p.superseded); n != 0 {
		t.Errorf("superseded gauge %v after the take-over, want 0", n)
	}
}

// Several identities started in one interval in one shard are claimed one
// per write.
func TestPublisherOneClaimPerWrite(t *testing.T) {
	r := newRig(t)
	var es []reservation.Entry
	shard := ShardOf("db-0")
	for i := 0; len(es) < 4; i++ {
		id := fmt.Sprintf("db-%d", i)
		if ShardOf(id) != shard {
			continue
		}
		r.api.bound["db/"+id] = "node1"
		es = append(es, allocated(fmt.Sprintf("10.244.1.%d", 10+i), "db", id, id, t0))
	}
	r.store.set(es...)
	r.pass()
	if r.writes(WriteClaim) != 4 || r.errors("refused") != 0 {
		t.Fatalf("claims %d, refused %d: want 4 writes, none refused", r.writes(WriteClaim), r.errors("refused"))
	}
	for _, e := range es {
		if _, ok := r.api.hold("db", e.Identity.Name); !ok {
			t.Errorf("%s not published", e.Identity.Name)
		}
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
	}
	if r.errors("get") != 4 || strings.Count(r.logs.String(), "placement step failed") != 1 {
		t.Fatalf("get errors %d, logged:\n%s\nwant 4 counted, 1 logged", r.errors("get"), r.logs)
	}
	r.api.down = false
	r.pass()
	if _, ok := r.api.hold("db", "db-0"); !ok {
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
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, t0.Add(time.Hour)))
	r.pass()
	if _, ok := r.api.hold("db", "db-0"); !ok {
		t.Fatal("not published")
	}
	cur = netip.MustParsePrefix("10.244.3.0/24") // the node came back with another podCIDR
	r.pass()
	if h, ok := r.api.hold("db", "db-0"); ok {
		t.Errorf("entry of an address outside the node's range still published: %+v", h)
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
	if got := r.api.shards[ref].owners["node1"]; got != "uid-node1" {
		t.Fatalf("owner %q", got)
	}
	r.api.uids = map[string]types.UID{"node1": "uid-node1-again"}
	delete(r.api.shards[ref].owners, "node1") // the garbage collector
	r.now = r.now.Add(6 * time.Minute)        // the shard is read again
	r.pass()
	if got := r.api.shards[ref].owners["node1"]; got != "uid-node1-again" {
		t.Errorf("after the Node was registered again: owner %q, want uid-node1-again", got)
	}
}

// A damaged file of written shards is reported and replaced, never trusted.
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
	if _, ok := r.api.hold("db", "db-0"); !ok {
		t.Error("cbr0's identity not published")
	}
	if h, ok := r.api.hold("db", "web"); ok {
		t.Errorf("the network without config published %+v", h)
	}
	if !strings.Contains(r.logs.String(), "network broken") || r.errors("ranges") != 1 {
		t.Errorf("the network without config not reported (errors %d):\n%s", r.errors("ranges"), r.logs)
	}
}
