package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

// A publisher given no timing publishes every 5 s, gives each request 5 s
// and backs off up to 5 min, as Options says; timings given are kept.
func TestPublisherDefaults(t *testing.T) {
	p := New(&fakeAPI{}, Options{Node: "node1"}) // no Registry: nothing registered, no panic
	if p.opts.Interval != 5*time.Second || p.opts.Timeout != 5*time.Second || p.opts.MaxBackoff != 5*time.Minute ||
		p.opts.Log == nil || p.opts.Now == nil {
		t.Fatalf("defaults: interval %v, timeout %v, max back-off %v, log %v, clock set %v; want 5s, 5s, 5m0s, a logger, a clock",
			p.opts.Interval, p.opts.Timeout, p.opts.MaxBackoff, p.opts.Log, p.opts.Now != nil)
	}
	log := slog.New(slog.DiscardHandler)
	p = New(&fakeAPI{}, Options{Node: "node1", Interval: 2 * time.Second, Timeout: 3 * time.Second, MaxBackoff: 7 * time.Minute, Log: log})
	if p.opts.Interval != 2*time.Second || p.opts.Timeout != 3*time.Second || p.opts.MaxBackoff != 7*time.Minute || p.opts.Log != log {
		t.Fatalf("given: interval %v, timeout %v, max back-off %v; want 2s, 3s, 7m0s and the logger given", p.opts.Interval, p.opts.Timeout, p.opts.MaxBackoff)
	}
}

// The publisher's metrics are exported on the registry given, the write
// kinds at 0 before the first write.
func TestPublisherExportsItsMetrics(t *testing.T) {
	s := newSetup(t)
	n, err := testutil.GatherAndCount(s.reg, "checkpointd_placement_writes_total", "checkpointd_placement_records", "checkpointd_placement_superseded")
	if err != nil || n != 5 {
		t.Fatalf("%d series of the publisher exported (%v), want 5 (3 write kinds, records, superseded)", n, err)
	}
}

func (s *setup) errors(step string) float64 {
	return testutil.ToFloat64(s.pub.errs.WithLabelValues(step))
}

// What the node holds decides what it publishes: no answer at all skips
// the pass (publishing none would remove every entry); an answer for some
// networks publishes theirs and counts the failure; a whole answer counts
// none.
func TestPublisherAsksWhatTheNodeHolds(t *testing.T) {
	store := entries{
		rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now, time.Time{}),
		rec("10.1.0.2", "db", "db-1", "db-1", "p1", reservation.Allocated, 10*time.Minute, now, time.Time{}),
	}
	notTen1 := func(e reservation.Entry) bool { return !strings.HasPrefix(e.IP.String(), "10.1.") }
	for _, tc := range []struct {
		name       string
		holds      func(reservation.Entry) bool
		err        error
		published  []string // nil: no write
		rangesErrs float64
	}{
		{"no answer", nil, errors.New("the node's Node is not known"), nil, 1},
		{"some networks answered", notTen1, errors.New("network other: no ranges"), []string{"db-0"}, 1},
		{"all answered", notTen1, nil, []string{"db-0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t)
			*s.store = store
			s.pub.opts.Holds = func() (func(reservation.Entry) bool, error) { return tc.holds, tc.err }
			s.pub.Pass(context.Background())
			if got := s.errors("ranges"); got != tc.rangesErrs {
				t.Errorf("placement_errors_total{step=ranges} %v, want %v", got, tc.rangesErrs)
			}
			if tc.published == nil {
				if s.api.writes != 0 {
					t.Fatalf("%d writes, spec %+v; want none", s.api.writes, s.api.spec)
				}
				return
			}
			var got []string
			if s.api.spec != nil {
				for _, e := range s.api.spec.Entries {
					got = append(got, e.Identity)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.published) {
				t.Fatalf("published %v, want %v", got, tc.published)
			}
		})
	}
}

// A record with room for all counts no "full" failure; one with too many
// identities counts one a pass.
func TestPublisherCountsAFullRecord(t *testing.T) {
	s := newSetup(t)
	*s.store = entries{rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now, time.Time{})}
	s.pub.Pass(context.Background())
	if got := s.errors("full"); got != 0 {
		t.Fatalf("placement_errors_total{step=full} %v with one identity, want 0", got)
	}
	var many entries
	for i := range placementv1.MaxEntries + 1 {
		ip := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}).String()
		many = append(many, rec(ip, "db", fmt.Sprintf("p-%d", i), fmt.Sprintf("p-%d", i), "u", reservation.Allocated, time.Hour, now, time.Time{}))
	}
	*s.store = many
	s.pub.Pass(context.Background())
	if got := s.errors("full"); got != 1 {
		t.Fatalf("placement_errors_total{step=full} %v with %d identities, want 1", got, len(many))
	}
}

// A write the API server refuses (no grant yet) is logged with what to
// apply; the controller's refusals of the node's claims are logged, each
// once, and accepted claims are not.
func TestPublisherLogsWhatToDo(t *testing.T) {
	var buf bytes.Buffer
	s := newSetup(t)
	s.pub.opts.Log = slog.New(slog.NewTextHandler(&buf, nil))
	s.api.err = apierrors.NewForbidden(schema.GroupResource{Group: "stickyip.io", Resource: "noderecords"}, "node1", errors.New("no grant"))
	s.watched = true
	s.record = &placementv1.NodeRecord{Spec: placementv1.NodeRecordSpec{NodeUID: "n1"}, Status: placementv1.NodeRecordStatus{NodeUID: "n1",
		Claims: []placementv1.Claim{{Namespace: "db", Identity: "db-1", PodUID: "p1", Indexed: true}, {Namespace: "db", Identity: "db-2", Refused: "not bound here"}}}}
	*s.store = entries{rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now, time.Time{})}
	s.pub.Pass(context.Background())
	s.clock = s.clock.Add(time.Hour)
	s.pub.Pass(context.Background())
	out := buf.String()
	if !strings.Contains(out, "deploy/placement/nodes") {
		t.Errorf("a refused write logged without what to apply:\n%s", out)
	}
	if n := strings.Count(out, "refused this node's claim"); n != 1 || !strings.Contains(out, "not bound here") || strings.Contains(out, "identity=db/db-1") {
		t.Errorf("want db-2's refusal logged once, db-1 (accepted) not at all; %d refusals logged:\n%s", n, out)
	}
}

// Of an identity on two networks, the pod that holds it last (the later
// allocation) is the one published, whatever the order of the records.
func TestDesiredNamesTheLatestPod(t *testing.T) {
	newer := rec("10.0.0.2", "db", "db-0", "db-0", "p-new", reservation.Allocated, 10*time.Minute, now, time.Time{})
	older := rec("10.1.0.2", "db", "db-0", "db-0", "p-old", reservation.Reserved, 10*time.Minute, now.Add(-time.Hour), now.Add(time.Minute))
	older.Network = "other"
	for _, es := range [][]reservation.Entry{{newer, older}, {older, newer}} {
		got, _ := Desired("node1", es, now, nil)
		if len(got) != 1 || got[0].PodUID != "p-new" || !got[0].Since.Time.Equal(now) {
			t.Fatalf("published %+v, want db-0 under p-new since %v", got, now)
		}
	}
}

// A record of an older stickyip (Legacy) is a key's when its pod had
// another name than the identity and than a restored copy of it
// (<name>-<node>); else the pod's own name.
func TestPublishedLegacy(t *testing.T) {
	for _, tc := range []struct{ pod, identity, wantPod string }{
		{"", "db-0", "db-0"},
		{"db-0", "db-0", "db-0"},
		{"db-0-node1", "db-0", "db-0"},
		{"cache-x1", "identity:db-0", "cache-x1"},
	} {
		r := &reservation.Record{PodName: tc.pod, Identity: reservation.Identity{Namespace: "db", Name: "db-0", Legacy: true}}
		if id, pod := published("node1", r); id != tc.identity || pod != tc.wantPod {
			t.Errorf("legacy record of pod %q published as %s (pod %s), want %s (pod %s)", tc.pod, id, pod, tc.identity, tc.wantPod)
		}
	}
}
