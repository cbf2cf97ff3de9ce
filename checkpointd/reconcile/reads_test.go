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

// A pass reads each of its inputs at most once (on a small node
// the re-reads were most of checkpointd's cost): the runtime's sandboxes
// one ListPodSandbox, the CNI config directory one read, the IPAM store one
// open, whatever the pass asks of them (leaks, the pools' gauges, the
// networks the configuration no longer keeps, the node's ranges, and the
// IPAM side the placement publisher asks through the same cache); and the
// directory and the store not at all while they have not changed (the
// store's version and the files' stat say so). A pass with
// nothing to change writes nothing. Before, a pass on this node read the
// config directory twice and opened the store 7 times, and the publisher's
// pass read them once and 7 times more (TestPublisherReadsEachChangeOnce).
func TestPassReadsEachInputOnce(t *testing.T) {
	h := newHarness(t)
	store, sandboxes := realIPAM(h, 20)
	h.rt.set(sandboxes...)
	h.cfg.IPAM, h.cfg.API = store, &nodeAPI{fakeAPI: h.api, node: node1("10.244.1.0/24")}
	h.start()
	h.pass() // the first records the Node's pod CIDR (a write)

	type reads struct{ lists, conf, store int64 }
	pass := func() reads {
		t.Helper()
		lists, confReads, uses := h.rt.lists, ipam.ConfDirReads(), store.Uses()
		h.advance(5 * time.Second)
		h.pass()
		return reads{int64(h.rt.lists - lists), ipam.ConfDirReads() - confReads, store.Uses() - uses}
	}
	if got := pass(); got != (reads{1, 1, 1}) {
		t.Errorf("the pass after the store changed: %+v, want one ListPodSandbox, one read of the directory, one of the store", got)
	}
	for i := range 3 {
		if got := pass(); got != (reads{1, 0, 0}) {
			t.Errorf("unchanged pass %d: %+v, want one ListPodSandbox and nothing else read", i, got)
		}
	}
	if got := testutilValue(h, "cbr0"); got != 20 {
		t.Fatalf("checkpointd_ipam_allocations{network=cbr0} = %v, want 20", got)
	}
	// A CNI ADD (another process) changes the store: read once.
	err := boltstore.New(h.storeDir(store), time.Second).Update("cbr0", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.244.1.200"), State: reservation.Allocated, ContainerID: "sb-new",
			IfName: "eth0", Identity: reservation.Identity{Namespace: "default", Name: "new", IfName: "eth0"}, AllocatedAt: h.now})
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := pass(); got.store != 1 || got.conf != 1 {
		t.Errorf("after an ADD: %+v, want the store and the directory read once", got)
	}
	if got := testutilValue(h, "cbr0"); got != 21 {
		t.Errorf("checkpointd_ipam_allocations{network=cbr0} = %v after the ADD, want 21", got)
	}
	if got := pass(); got != (reads{1, 0, 0}) {
		t.Errorf("unchanged pass after the ADD: %+v", got)
	}
	// The conflist switched to another data directory: read, and said.
	confFile := filepath.Join(store.ConfDir(), "10-cbr0.conflist")
	if err := os.WriteFile(confFile, []byte(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	unconfigured := testutil.ToFloat64(h.m.UnconfiguredSticky.WithLabelValues("cbr0"))
	if got := pass(); got.conf != 1 || unconfigured != 0 || testutil.ToFloat64(h.m.UnconfiguredSticky.WithLabelValues("cbr0")) != 20 {
		t.Errorf("after the conflist changed: %+v; want it read, and cbr0's 20 sticky allocations unconfigured", got)
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

// storeDir returns the data directory of s.
func (h *harness) storeDir(s *ipamstore.Store) string { return s.Dir() }
