package reconcile

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// A pass reads each of its inputs once (issue 48: on a small node the
// re-reads were most of checkpointd's cost): the runtime's sandboxes one
// ListPodSandbox, the CNI config directory one read, the IPAM store one
// open, whatever the pass asks of them (leaks, the pools' gauges, the
// networks the configuration no longer keeps, the node's ranges, and the
// IPAM side handed to the placement publisher, which reads nothing
// itself). A pass with nothing to change writes nothing. Before, a pass on
// this node read the config directory twice and opened the store 7 times,
// and the publisher's pass read them once and 7 times more
// (TestPublisherReadsWhatThePassRead).
func TestPassReadsEachInputOnce(t *testing.T) {
	h := newHarness(t)
	store, sandboxes := realIPAM(h, 20)
	h.rt.set(sandboxes...)
	var handed *ipamstore.View
	h.cfg.IPAM, h.cfg.API = store, &nodeAPI{fakeAPI: h.api, node: node1("10.244.1.0/24")}
	h.cfg.Observed = func(v *ipamstore.View) { handed = v }
	h.start()
	h.pass() // the first records the Node's pod CIDR (a write)

	for pass := range 3 {
		lists, confReads, uses := h.rt.lists, ipam.ConfDirReads(), store.Uses()
		h.advance(5 * time.Second)
		h.pass()
		if got := h.rt.lists - lists; got != 1 {
			t.Errorf("pass %d listed the runtime's sandboxes %d times, want 1", pass, got)
		}
		if got := ipam.ConfDirReads() - confReads; got != 1 {
			t.Errorf("pass %d read the CNI config directory %d times, want 1", pass, got)
		}
		if got := store.Uses() - uses; got != 1 {
			t.Errorf("pass %d opened the IPAM store %d times, want 1", pass, got)
		}
	}
	if handed == nil || len(handed.Entries) != 20 || handed.Pools["cbr0"].Allocated != 20 || len(handed.Ranges.Current) != 1 {
		t.Fatalf("the pass handed on %+v, want the 20 records, the pool's totals and the node's range", handed)
	}
	if got := testutilValue(h, "cbr0"); got != 20 {
		t.Errorf("checkpointd_ipam_allocations{network=cbr0} = %v, want 20", got)
	}
}

// realIPAM makes a stickyip store (network cbr0, 10.244.1.0/24, its
// conflist in a CNI config dir) holding n allocations of running sandboxes
// p-0… of namespace default, each sticky (a 10-minute reservation).
func realIPAM(h *harness, n int) (*ipamstore.Store, []cri.Sandbox) {
	h.t.Helper()
	root := h.t.TempDir()
	dataDir, confDir := filepath.Join(root, "data"), filepath.Join(root, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`, dataDir)
	if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
		h.t.Fatal(err)
	}
	var sandboxes []cri.Sandbox
	err := boltstore.New(dataDir, time.Second).Update("cbr0", func(tx reservation.Txn) error {
		for i := range n {
			id := fmt.Sprintf("sb-p-%d", i)
			sandboxes = append(sandboxes, cri.Sandbox{ID: id, Namespace: "default", Name: fmt.Sprintf("p-%d", i), Ready: true})
			if err := tx.Put(&reservation.Record{IP: netip.MustParseAddr(fmt.Sprintf("10.244.1.%d", 10+i)), State: reservation.Allocated,
				ContainerID: id, IfName: "eth0", Identity: reservation.Identity{Namespace: "default", Name: fmt.Sprintf("p-%d", i), IfName: "eth0"},
				Duration: 10 * time.Minute, AllocatedAt: h.now.Add(-time.Hour)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return ipamstore.NewWithEnv(dataDir, time.Second, ipam.Env{Now: func() time.Time { return h.now }}).WithCNIConfDir(confDir), sandboxes
}

// BenchmarkPass is one reconcile pass of a node with the kubelet's default
// 110 pods, each checkpointed and sticky, nothing to change: what
// checkpointd costs every --interval.
func BenchmarkPass(b *testing.B) {
	h := newHarness(b)
	store, _ := realIPAM(h, maxPodsBench)
	var sandboxes []cri.Sandbox
	for i := range maxPodsBench {
		p := pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-%d", i), "registry.example/app:1", true)
		h.api.put(p)
		sandboxes = append(sandboxes, sandbox(fmt.Sprintf("sb-p-%d", i), p, true))
	}
	h.rt.set(sandboxes...)
	h.cfg.IPAM, h.cfg.API = store, &nodeAPI{fakeAPI: h.api, node: node1("10.244.1.0/24")}
	h.start()
	h.pass()
	if n := len(h.r.pods); n != maxPodsBench {
		b.Fatalf("%d pods tracked, want %d", n, maxPodsBench)
	}
	for b.Loop() {
		h.advance(5 * time.Second)
		h.pass()
	}
}

// maxPodsBench is the kubelet's default maxPods.
const maxPodsBench = 110

// A Secret or ConfigMap that many pods mount (a Deployment's, a
// StatefulSet's) is read from the API server once in a pass that saves
// them all: at the first pass, after a burst of new pods, and at every
// refresh. It was read once per pod.
func TestPassReadsEachObjectOnce(t *testing.T) {
	h := newHarness(t)
	var sandboxes []cri.Sandbox
	for i := range 10 {
		p := pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("uid-%d", i), "nginx:1", true)
		h.api.put(p)
		sandboxes = append(sandboxes, sandbox(fmt.Sprintf("sb-%d", i), p, true))
	}
	h.rt.set(sandboxes...)
	h.pass()
	if n := testutil.ToFloat64(h.m.SavesTotal); n != 10 {
		t.Fatalf("%v checkpoints saved, want 10", n)
	}
	if n := h.api.gets["Secret"]; n != 1 {
		t.Errorf("the Secret the 10 pods mount was read %d times in the pass, want 1", n)
	}
	h.advance(h.cfg.Refresh)
	h.pass() // every pod refreshed
	if n := h.api.gets["Secret"]; n != 2 {
		t.Errorf("after the refresh pass the Secret was read %d times in all, want 2", n)
	}
}
