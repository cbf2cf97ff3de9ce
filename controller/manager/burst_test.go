package manager

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api/apitest"
)

// burst returns 50 Nodes with 10 pods each in namespaces a and b, and the
// records that claim them.
func burst() ([]runtime.Object, []*placementv1.NodeRecord) {
	var objs []runtime.Object
	var recs []*placementv1.NodeRecord
	for n := range 50 {
		name := fmt.Sprintf("n%02d", n)
		uid := types.UID("nu-" + name)
		objs = append(objs, node(name, uid))
		var entries []placementv1.Entry
		for i := range 10 {
			ns := []string{"a", "b"}[i%2]
			p := fmt.Sprintf("%s-%d", name, i)
			pu := types.UID("pu-" + p)
			objs = append(objs, pod(ns, p, pu, name, 0))
			entries = append(entries, entry(ns, p, p, pu, true))
		}
		recs = append(recs, nodeRecord(name, uid, entries...))
	}
	return objs, recs
}

// converged reports whether every claim of recs is accepted and indexed.
func (h *harness) converged(recs []*placementv1.NodeRecord) bool {
	if len(h.index("a"))+len(h.index("b")) != 500 {
		return false
	}
	for _, r := range recs {
		got := h.srv.Record(r.Name)
		if len(got.Status.Claims) != 10 {
			return false
		}
		for _, c := range got.Status.Claims {
			if !c.Indexed {
				return false
			}
		}
	}
	return true
}

// A burst of 500 claims from 50 records reaches the index within seconds
// in a handful of shard writes per namespace, not one per claim, and one
// status write per record.
func TestBurstCoalesces(t *testing.T) {
	objs, recs := burst()
	h := newHarness(t, objs...)
	h.ready(Defaults()) // the shipped batch window
	start := time.Now()
	for _, r := range recs {
		h.srv.PutRecord(r)
	}
	poll(t, "500 claims indexed", func() bool { return h.converged(recs) })
	took := time.Since(start)
	shardWrites := h.shardWrites("create", "patch")
	statusWrites := h.srv.Writes("patch", apitest.RecordsStatus)
	t.Logf("500 claims of 50 records in 2 namespaces: indexed in %v, %d shard writes, %d status writes", took.Round(time.Millisecond), shardWrites, statusWrites)
	if took > 10*time.Second {
		t.Errorf("took %v, want within 10 s", took)
	}
	if shardWrites > 2*3 {
		t.Errorf("%d shard writes for 2 namespaces: want a few per namespace, not one per claim", shardWrites)
	}
	if statusWrites > 50+5 {
		t.Errorf("%d status writes for 50 records", statusWrites)
	}
}

// passes returns how many passes m has begun.
func passes(t *testing.T, m *Manager) uint64 {
	var d dto.Metric
	if err := m.metrics.passes.Write(&d); err != nil {
		t.Fatal(err)
	}
	return uint64(d.GetCounter().GetValue())
}

// The same burst spread over a second, as nodes publish it: about one
// write per changed shard per pass.
func TestBurstSpread(t *testing.T) {
	objs, recs := burst()
	h := newHarness(t, objs...)
	m := h.ready(Defaults())
	first := passes(t, m)
	for _, r := range recs {
		h.srv.PutRecord(r)
		time.Sleep(20 * time.Millisecond) // the nodes' writes, spread
	}
	poll(t, "500 claims indexed", func() bool { return h.converged(recs) })
	n := passes(t, m) - first
	shardWrites := h.shardWrites("create", "patch")
	statusWrites := h.srv.Writes("patch", apitest.RecordsStatus)
	t.Logf("500 claims of 50 records over 1 s: %d passes, %d shard writes, %d status writes", n, shardWrites, statusWrites)
	if uint64(shardWrites) > 2*n || n > 15 {
		t.Errorf("%d shard writes in %d passes for 2 namespaces: want at most one per namespace and pass", shardWrites, n)
	}
	if statusWrites > 50+5 {
		t.Errorf("%d status writes for 50 records", statusWrites)
	}
}

// Nothing is lost at a restart and nothing is written again: a new
// controller on the same records and shards finds every verdict and entry
// where the last one left them.
func TestRestartWritesNothing(t *testing.T) {
	objs, recs := burst()
	h := newHarness(t, objs...)
	cfg := testConfig()
	h.ready(cfg)
	for _, r := range recs {
		h.srv.PutRecord(r)
	}
	poll(t, "500 claims indexed", func() bool { return h.converged(recs) })
	// A claim whose pod is gone since: accepted before, kept after.
	if err := h.kube.Tracker().Delete(podsGVR, "a", "n00-0"); err != nil {
		t.Fatal(err)
	}
	h.halt()
	before, index := h.allWrites(), h.index("a")
	h.ready(cfg)
	if n := h.allWrites(); n != before {
		t.Fatalf("the first sync after a restart made %d writes", n-before)
	}
	if got := h.index("a"); len(got) != len(index) || got["n00-0"] != "n00" {
		t.Fatalf("index of a after the restart: %d identities, n00-0 on %q", len(got), got["n00-0"])
	}
}
