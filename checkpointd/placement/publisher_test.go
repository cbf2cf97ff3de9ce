package placement

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

// fakeAPI is the API server as the publisher sees it: the record as
// written, a failure to give, and the Node's former annotation removed.
type fakeAPI struct {
	spec   *placementv1.NodeRecordSpec
	writes int
	err    error
	forgot int
}

func (a *fakeAPI) Get(context.Context) (*placementv1.NodeRecord, error) {
	if a.spec == nil {
		return nil, nil
	}
	return &placementv1.NodeRecord{Spec: *a.spec}, nil
}

func (a *fakeAPI) Publish(_ context.Context, spec placementv1.NodeRecordSpec) (*placementv1.NodeRecord, error) {
	a.writes++
	if a.err != nil {
		return nil, a.err
	}
	a.spec = &spec
	return &placementv1.NodeRecord{Spec: spec}, nil
}

func (a *fakeAPI) ForgetFormer(context.Context) error { a.forgot++; return nil }

type entries []reservation.Entry

func (e *entries) Entries() ([]reservation.Entry, error) { return *e, nil }

type setup struct {
	api     *fakeAPI
	store   *entries
	node    *corev1.Node
	clock   time.Time
	reg     *prometheus.Registry
	pub     *Publisher
	record  *placementv1.NodeRecord // what the watch shows (nil with watched false: not listed)
	watched bool
}

func newSetup(t *testing.T) *setup {
	s := &setup{api: &fakeAPI{}, store: &entries{}, clock: now, reg: prometheus.NewRegistry(),
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "n1"}}}
	s.pub = New(s.api, Options{Node: "node1", Store: s.store, Interval: time.Second, MaxBackoff: time.Minute, Registry: s.reg,
		NodeObject: func() (*corev1.Node, bool) { return s.node, s.node != nil },
		Record:     func() (*placementv1.NodeRecord, bool) { return s.record, s.watched },
		Now:        func() time.Time { return s.clock }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return s
}

func (s *setup) writes(kind string) float64 {
	return testutil.ToFloat64(s.pub.writes.WithLabelValues(kind))
}

// What the API server sees of a sticky pod's life on the node: its ADD
// claims it, its DEL (a reservation) updates its end, its expiry releases
// it — one write each, nothing when nothing changed, and the record always
// names the node's Node UID.
func TestPublisherLifecycle(t *testing.T) {
	s := newSetup(t)
	ctx := context.Background()
	s.pub.Pass(ctx)
	if s.api.writes != 1 || s.api.spec.NodeUID != "n1" || len(s.api.spec.Entries) != 0 {
		t.Fatalf("first pass: %d writes, spec %+v; want the empty record under n1", s.api.writes, s.api.spec)
	}
	*s.store = entries{rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now, time.Time{})}
	s.pub.Pass(ctx)
	s.pub.Pass(ctx)
	if s.api.writes != 2 || len(s.api.spec.Entries) != 1 || s.writes(WriteClaim) != 1 {
		t.Fatalf("after the ADD: %d writes, %d claims, spec %+v; want one claim of db-0", s.api.writes, int(s.writes(WriteClaim)), s.api.spec)
	}
	*s.store = entries{rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Reserved, 10*time.Minute, now, now.Add(10*time.Minute))}
	s.pub.Pass(ctx)
	if s.api.writes != 3 || s.api.spec.Entries[0].Until == nil || s.writes(WriteUpdate) != 1 {
		t.Fatalf("after the DEL: %d writes, spec %+v; want db-0's end written", s.api.writes, s.api.spec)
	}
	s.clock = now.Add(11 * time.Minute)
	s.pub.Pass(ctx)
	if s.api.writes != 4 || len(s.api.spec.Entries) != 0 || s.writes(WriteRelease) != 1 {
		t.Fatalf("after the expiry: %d writes, spec %+v; want db-0 released", s.api.writes, s.api.spec)
	}
}

// A spec someone else changed (an administrator's edit) is written back as
// the store says, as soon as the watch shows it.
func TestPublisherRepairsTheRecord(t *testing.T) {
	s := newSetup(t)
	*s.store = entries{rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now, time.Time{})}
	s.pub.Pass(context.Background())
	s.watched, s.record = true, &placementv1.NodeRecord{Spec: *s.api.spec}
	s.pub.Pass(context.Background())
	if s.api.writes != 1 {
		t.Fatalf("the watch shows the record as written: %d writes, want 1", s.api.writes)
	}
	s.record = &placementv1.NodeRecord{Spec: placementv1.NodeRecordSpec{NodeUID: "n1"}} // emptied by someone
	s.pub.Pass(context.Background())
	if s.api.writes != 2 || len(s.api.spec.Entries) != 1 {
		t.Fatalf("after an edit: %d writes, spec %+v; want db-0 written back", s.api.writes, s.api.spec)
	}
}

// A failed write is tried again after a growing wait, not at every pass;
// the first success resets it. Nothing is written while the Node is not
// known (its UID goes into the record).
func TestPublisherBacksOff(t *testing.T) {
	s := newSetup(t)
	s.node = nil
	s.pub.Pass(context.Background())
	if s.api.writes != 0 {
		t.Fatalf("%d writes without the Node's UID, want 0", s.api.writes)
	}
	s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "n1"}}
	s.api.err = errors.New("the API server is away")
	s.pub.Pass(context.Background())
	s.clock = s.clock.Add(500 * time.Millisecond) // within the first wait (the interval, at least)
	s.pub.Pass(context.Background())
	if s.api.writes != 1 {
		t.Fatalf("%d writes within the wait after a failure, want 1", s.api.writes)
	}
	s.clock = s.clock.Add(2 * time.Second) // past it (1 s, up to half again)
	s.api.err = nil
	s.pub.Pass(context.Background())
	if s.api.writes != 2 || s.api.spec == nil {
		t.Fatalf("%d writes after the wait, spec %v; want the record written", s.api.writes, s.api.spec)
	}
}

// A node whose writes were refused before the nodes' grant was applied
// (its watch never listed the record) writes as soon as its watch lists
// the record, not after the back-off its refusals grew: placement starts
// working on every node right after the install.
func TestPublisherWritesOnceServed(t *testing.T) {
	s := newSetup(t)
	s.api.err = errors.New(`noderecords.stickyip.io "node1" is forbidden`)
	for range 10 { // each pass past the wait: refused, and the wait grows to MaxBackoff
		s.clock = s.clock.Add(2 * time.Minute)
		s.pub.Pass(context.Background())
	}
	refused := s.api.writes
	s.api.err = nil // the grant applied
	s.clock = s.clock.Add(time.Second)
	s.pub.Pass(context.Background())
	if s.api.writes != refused {
		t.Fatalf("%d writes within the wait while the watch had not listed the record, want none (else this test shows nothing)", s.api.writes-refused)
	}
	s.watched = true // the watch lists the record (none yet)
	s.clock = s.clock.Add(time.Second)
	s.pub.Pass(context.Background())
	if s.api.spec == nil {
		t.Fatalf("%d writes once the watch listed the record, spec %v; want it written at once", s.api.writes-refused, s.api.spec)
	}
}

// A node upgraded from the former index drops its Node's annotation once;
// a Node without it is never patched.
func TestPublisherForgetsTheFormerAnnotation(t *testing.T) {
	s := newSetup(t)
	s.pub.Pass(context.Background())
	if s.api.forgot != 0 {
		t.Fatalf("a Node without the annotation patched %d times", s.api.forgot)
	}
	s = newSetup(t)
	s.node.Annotations = map[string]string{FormerAnnotation: "db/05"}
	s.pub.Pass(context.Background())
	s.pub.Pass(context.Background())
	if s.api.forgot != 1 {
		t.Fatalf("the former annotation removed %d times, want once", s.api.forgot)
	}
}

// The controller's verdicts reach the node's metrics: identities the index
// gives to another node (it ran their pod since) are counted, and only
// claims judged under the record's Node UID count.
func TestPublisherCountsSuperseded(t *testing.T) {
	s := newSetup(t)
	s.watched = true
	s.record = &placementv1.NodeRecord{Spec: placementv1.NodeRecordSpec{NodeUID: "n1"}, Status: placementv1.NodeRecordStatus{NodeUID: "n1",
		Claims: []placementv1.Claim{{Namespace: "db", Identity: "db-0", PodUID: "p0", Indexed: false},
			{Namespace: "db", Identity: "db-1", PodUID: "p1", Indexed: true}, {Namespace: "db", Identity: "db-2", Refused: "not bound here"}}}}
	s.pub.Pass(context.Background())
	if got := testutil.ToFloat64(s.pub.superseded); got != 1 {
		t.Fatalf("superseded %v, want 1 (db-0)", got)
	}
	s.record.Status.NodeUID = "n0"
	s.pub.Pass(context.Background())
	if got := testutil.ToFloat64(s.pub.superseded); got != 0 {
		t.Fatalf("superseded %v under claims of an earlier Node, want 0", got)
	}
}
