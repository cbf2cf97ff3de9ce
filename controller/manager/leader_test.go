package manager

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// heldLease is the controller's Lease held by another replica for an hour.
func heldLease(holder string) *coordinationv1.Lease {
	d := int32(3600)
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "stickyip-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, AcquireTime: &now, RenewTime: &now}}
}

func electing() Config {
	cfg := testConfig()
	cfg.LeaderElect, cfg.Identity = true, "me"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, time.Second, 50*time.Millisecond
	return cfg
}

// leaseGets counts the elector's reads of the Lease.
func (h *harness) leaseGets() int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == leasesGVR {
			n++
		}
	}
	return n
}

// A replica that does not hold the Lease keeps its caches and writes
// nothing: no status, no shard, no Event; once the Lease is free it leads
// and writes (the control that it would have).
func TestFollowerWritesNothing(t *testing.T) {
	h := newHarness(t, heldLease("other"), node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0), pod("ns", "x-0", "p2", "n2", 0))
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true), entry("ns", "x-0", "x-0", "p2", true)))
	m := h.start(electing())
	poll(t, "the caches synced", m.synced.Load)
	gets := h.leaseGets()
	poll(t, "three more tries at the Lease", func() bool { return h.leaseGets() >= gets+3 })
	if n := h.allWrites(); n != 0 {
		t.Fatalf("a follower made %d writes", n)
	}
	if ev := h.events("n1"); len(ev) != 0 {
		t.Fatalf("a follower sent Events: %q", ev)
	}
	if ok, why := m.Ready(); !ok || why != "ok: following" {
		t.Fatalf("follower ready: %v %q", ok, why)
	}
	if err := h.kube.Tracker().Delete(leasesGVR, "kube-system", "stickyip-controller"); err != nil {
		t.Fatal(err)
	}
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	poll(t, "the refusal's Event", func() bool { return len(h.events("n1")) == 1 })
	poll(t, "ready as the leader", func() bool { ok, why := m.Ready(); return ok && why == "ok: leading" })
}

// A leader that loses the Lease stops writing: Run returns ErrLostLease
// once its term's passes are over (the process then ends and starts again
// as a candidate).
func TestLostLeaseStopsWrites(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0))
	m := h.start(electing())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	// Another replica takes the Lease: from now on the API server shows it
	// as that replica's and refuses this one's updates (Conflict), whatever
	// update of this one was on its way.
	var taken atomic.Bool
	h.kube.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		return true, heldLease("other"), nil
	})
	h.kube.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		if !taken.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), "stickyip-controller", errors.New("the object has been modified"))
	})
	taken.Store(true)
	var err error
	select {
	case err = <-h.done:
		h.stop = nil
	case <-time.After(20 * time.Second):
		t.Fatal("still running with the Lease taken")
	}
	if !errors.Is(err, ErrLostLease) || m.leading.Load() {
		t.Fatalf("Run: %v, leading %v", err, m.leading.Load())
	}
}

// /readyz answers 503 until the caches are synced and, for the leader, its
// first index sync is done; /metrics says it leads.
func TestReadyAndMetrics(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0))
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	m := h.start(testConfig())
	if ok, why := m.Ready(); ok && !m.firstSynced.Load() {
		t.Fatalf("ready before the first sync: %q", why)
	}
	poll(t, "listening", func() bool { return m.Addr() != "" })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + m.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	poll(t, "/readyz 200", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if !m.firstSynced.Load() {
		t.Fatal("/readyz answered 200 before the first index sync")
	}
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}
	poll(t, "the metrics of the sync", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, "stickyip_controller_leader 1") && strings.Contains(body, `stickyip_controller_claims_total{verdict="accepted"} 1`) &&
			strings.Contains(body, `stickyip_controller_index_writes_total{op="create"} 1`) && strings.Contains(body, "stickyip_controller_index_identities 1") &&
			strings.Contains(body, "stickyip_controller_records 1") && strings.Contains(body, "stickyip_controller_sync_seconds_count")
	})
}

// A leader of a cluster with no record and no shard yet (placement just
// installed) is ready at once: there is nothing to sync first.
func TestReadyWithNothingToSync(t *testing.T) {
	h := newHarness(t)
	m := h.start(testConfig())
	poll(t, "ready as the leader with no record", func() bool { ok, why := m.Ready(); return ok && why == "ok: leading" })
	if n := h.allWrites(); n != 0 {
		t.Fatalf("%d writes with nothing to write", n)
	}
}
