package placement

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/stickyip/stickyip/reservation"
)

type fakeStore struct {
	mu      sync.Mutex
	entries []reservation.Entry
}

func (s *fakeStore) Entries() ([]reservation.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]reservation.Entry(nil), s.entries...), nil
}

func (s *fakeStore) set(es ...reservation.Entry) { s.mu.Lock(); s.entries = es; s.mu.Unlock() }

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func entry(ip string, state reservation.State, ns, name string, dur time.Duration, expires time.Time) reservation.Entry {
	return reservation.Entry{Network: "cbr0", Record: &reservation.Record{
		IP: netip.MustParseAddr(ip), State: state, ContainerID: "sb1", IfName: "eth0",
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, Duration: dur, ExpiresAt: expires,
	}}
}

func node(name, uid string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node"}}
	u.SetName(name)
	u.SetUID(types.UID(uid))
	return u
}

type rig struct {
	t     *testing.T
	p     *Publisher
	store *fakeStore
	fake  *dynamicfake.FakeDynamicClient
	now   time.Time
	reg   *prometheus.Registry
}

func newRig(t *testing.T, objs ...runtime.Object) *rig {
	t.Helper()
	fake := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{Resource: "IPHoldList", nodesResource: "NodeList"},
		append([]runtime.Object{node("node1", "uid-1")}, objs...)...)
	// The fake keeps no resourceVersions; the API server does, and the
	// publisher relies on them to know when the watch shows its write.
	var rv atomic.Int64
	fake.PrependReactor("*", "ipholds", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(interface{ GetObject() runtime.Object }); ok && o.GetObject() != nil {
			o.GetObject().(*unstructured.Unstructured).SetResourceVersion(strconv.FormatInt(rv.Add(1), 10))
		}
		return false, nil, nil
	})
	r := &rig{t: t, store: &fakeStore{}, fake: fake, now: t0, reg: prometheus.NewRegistry()}
	r.p = NewWithClients(fake, fake, Options{Node: "node1", Store: r.store, Registry: r.reg,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return r.now }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go r.p.informer.Run(ctx.Done())
	r.eventually("informer synced", func() bool { return r.p.informer.HasSynced() })
	return r
}

func (r *rig) eventually(what string, ok func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	r.t.Fatalf("timed out waiting for %s", what)
}

// records lists the IPHolds in the API, by namespace/name.
func (r *rig) records() map[string]*unstructured.Unstructured {
	r.t.Helper()
	l, err := r.fake.Resource(Resource).Namespace("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]*unstructured.Unstructured{}
	for i := range l.Items {
		out[l.Items[i].GetNamespace()+"/"+l.Items[i].GetName()] = &l.Items[i]
	}
	return out
}

// settle runs passes until the informer shows what the API holds.
func (r *rig) settle() {
	r.t.Helper()
	r.eventually("watch caught up", func() bool {
		want := r.records()
		got := r.p.informer.GetStore().List()
		if len(got) != len(want) {
			return false
		}
		for _, o := range got {
			u := o.(*unstructured.Unstructured)
			w, ok := want[u.GetNamespace()+"/"+u.GetName()]
			if !ok || w.GetResourceVersion() != u.GetResourceVersion() {
				return false
			}
		}
		return true
	})
}

func (r *rig) writes(verb string) int {
	return int(testutil.ToFloat64(r.p.writes.WithLabelValues(verb)))
}

func TestLifecycleWritesThree(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	name := ObjectName("node1", "cbr0", "db-0", "eth0")

	// ADD: an allocation with a reservation duration gets a record.
	r.store.set(entry("10.244.1.5", reservation.Allocated, "db", "db-0", 5*time.Minute, time.Time{}),
		entry("10.244.1.6", reservation.Allocated, "db", "plain", 0, time.Time{})) // not sticky
	r.p.Pass(ctx)
	r.p.Pass(ctx) // before the watch shows the create: no second write
	recs := r.records()
	if len(recs) != 1 {
		t.Fatalf("records after ADD: %v, want one for db/db-0", recs)
	}
	u := recs["db/"+name]
	if u == nil {
		t.Fatalf("no record db/%s: %v", name, recs)
	}
	s, err := specOf(u)
	want := Spec{Identity: "db-0", Network: "cbr0", IfName: "eth0", NodeName: "node1", IPs: []string{"10.244.1.5"}, State: "allocated"}
	if err != nil || !s.Equal(want) {
		t.Errorf("record spec = %+v (%v), want %+v", s, err, want)
	}
	if !ownedBy(u, "uid-1") || u.GetOwnerReferences()[0].Name != "node1" || u.GetOwnerReferences()[0].APIVersion != "v1" {
		t.Errorf("owner references %+v, want the Node node1 (uid-1)", u.GetOwnerReferences())
	}
	r.settle()
	r.p.Pass(ctx)

	// DEL: the allocation becomes a reservation: one update with the expiry.
	exp := t0.Add(5 * time.Minute)
	r.store.set(entry("10.244.1.5", reservation.Reserved, "db", "db-0", 5*time.Minute, exp))
	r.p.Pass(ctx)
	r.settle()
	r.p.Pass(ctx)
	s, _ = specOf(r.records()["db/"+name])
	if s.State != "reserved" || !s.ExpiresAt.Equal(exp) {
		t.Errorf("after DEL: %+v, want reserved until %s", s, exp)
	}

	// Expiry: the store may still hold the expired reservation; the record goes.
	r.now = exp
	r.p.Pass(ctx)
	r.settle()
	r.p.Pass(ctx)
	if recs := r.records(); len(recs) != 0 {
		t.Errorf("records after expiry: %v, want none", recs)
	}
	if c, u, d := r.writes("create"), r.writes("update"), r.writes("delete"); c != 1 || u != 1 || d != 1 {
		t.Errorf("writes create/update/delete = %d/%d/%d, want 1/1/1", c, u, d)
	}
}

func TestOnlyOwnRecordsAreTouched(t *testing.T) {
	mine := Record{Namespace: "db", Name: ObjectName("node1", "cbr0", "gone", "eth0"),
		Spec: Spec{Identity: "gone", Network: "cbr0", IfName: "eth0", NodeName: "node1", IPs: []string{"10.244.1.9"}, State: "allocated"}}
	theirs := Record{Namespace: "db", Name: ObjectName("node2", "cbr0", "db-0", "eth0"),
		Spec: Spec{Identity: "db-0", Network: "cbr0", IfName: "eth0", NodeName: "node2", IPs: []string{"10.244.2.5"}, State: "allocated"}}
	r := newRig(t, mine.object("uid-1"), theirs.object("uid-2"))
	// The store holds nothing: this node's stale record goes (a release, or a
	// take-over while checkpointd was down); node2's is not this node's business.
	r.p.Pass(context.Background())
	recs := r.records()
	if _, ok := recs["db/"+mine.Name]; ok {
		t.Error("this node's record of an identity it no longer holds was kept")
	}
	if _, ok := recs["db/"+theirs.Name]; !ok {
		t.Error("another node's record was deleted")
	}
}

func TestDesired(t *testing.T) {
	exp := t0.Add(time.Minute)
	dual := entry("fd00::5", reservation.Allocated, "db", "db-0", time.Minute, time.Time{})
	got := Desired("node1", []reservation.Entry{
		entry("10.244.1.5", reservation.Allocated, "db", "db-0", time.Minute, time.Time{}),
		dual,
		entry("10.244.1.7", reservation.Reserved, "db", "old", time.Minute, exp),
		entry("10.244.1.8", reservation.Reserved, "db", "expired", time.Minute, t0),
		entry("10.244.1.9", reservation.Allocated, "db", "plain", 0, time.Time{}),
		entry("10.244.1.10", reservation.Cooling, "", "", 0, exp),
		entry("10.244.1.11", reservation.Allocated, "", "", time.Minute, time.Time{}), // no pod identity
	}, t0)
	if len(got) != 2 {
		t.Fatalf("Desired = %+v, want db/db-0 and db/old", got)
	}
	a := got["db/"+ObjectName("node1", "cbr0", "db-0", "eth0")]
	if a.Spec.State != "allocated" || len(a.Spec.IPs) != 2 || a.Spec.IPs[0] != "10.244.1.5" || a.Spec.IPs[1] != "fd00::5" {
		t.Errorf("dual-stack allocation: %+v", a)
	}
	o := got["db/"+ObjectName("node1", "cbr0", "old", "eth0")]
	if o.Spec.State != "reserved" || !o.Spec.ExpiresAt.Equal(exp) {
		t.Errorf("reservation: %+v", o)
	}
}

func TestObjectName(t *testing.T) {
	a, b := ObjectName("node1", "cbr0", "db-0", "eth0"), ObjectName("node2", "cbr0", "db-0", "eth0")
	if a == b || a[:len("db-0.node1.")] != "db-0.node1." {
		t.Errorf("names %q, %q: want distinct, readable, node included", a, b)
	}
	long := ObjectName("n", "cbr0", string(make([]byte, 250)), "eth0")
	if len(long) > 253 || long[0] != 'h' {
		t.Errorf("long identity: name %q", long)
	}
}
