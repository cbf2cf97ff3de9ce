package reconcile

import (
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// nodeAPI is the fake API server with the node's Node watched.
type nodeAPI struct {
	*fakeAPI
	node *corev1.Node
}

func (a *nodeAPI) NodePodCIDRs() (*corev1.Node, []netip.Prefix, bool) {
	if a.node == nil {
		return nil, nil, false
	}
	var out []netip.Prefix
	for _, c := range a.node.Spec.PodCIDRs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return a.node, out, true
}

// rangeIPAM is the fake IPAM recording node ranges as the engine does (the
// engine's own rules are tested in package ipam and ipamstore): what a
// retired range held is dropped.
type rangeIPAM struct {
	*fakeIPAM
	ranges ipam.NodeRanges
	calls  int
}

func (f *rangeIPAM) Observe() (*ipamstore.View, error) {
	v, err := f.fakeIPAM.Observe()
	v.Ranges = f.ranges
	return v, err
}

func (f *rangeIPAM) SetNodeRangesIn(_ *ipamstore.View, current []netip.Prefix) (ipam.NodeRanges, []reservation.Entry, bool, error) {
	f.calls++
	n := ipam.NodeRanges{Current: current}
	for _, p := range append(f.ranges.Retired, f.ranges.Current...) {
		if !samePrefixes([]netip.Prefix{p}, current) {
			n.Retired = append(n.Retired, p)
		}
	}
	var dropped []reservation.Entry
	var keep []reservation.Entry
	for _, e := range f.entries {
		if e.State != reservation.Allocated && n.Retires(e.IP) {
			dropped = append(dropped, e)
			continue
		}
		keep = append(keep, e)
	}
	f.entries, f.ranges = keep, n
	return n, dropped, true, nil
}

type nodeEvents struct {
	*fakeEvents
	onNode []string
}

func (e *nodeEvents) NodeEvent(n *corev1.Node, _, reason, msg string) {
	e.onNode = append(e.onNode, n.Name+" "+reason+": "+msg)
}

func node1(cidr string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node1-uid"}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
}

// checkpointd records the Node's pod CIDRs; when the Node comes back with
// another one it says so once, in the log and an Event on the Node naming
// the addresses dropped, and never puts back a flannel lease of the old
// range.
func TestNodeRangesChange(t *testing.T) {
	h := newHarness(t)
	api := &nodeAPI{fakeAPI: h.api}
	rip := &rangeIPAM{fakeIPAM: h.ipam}
	ev := &nodeEvents{fakeEvents: h.events}
	h.cfg.API, h.cfg.IPAM, h.cfg.Events = api, rip, ev
	h.start()

	h.pass() // the Node not seen yet
	if rip.calls != 0 {
		t.Fatalf("ranges recorded without a Node: %d calls", rip.calls)
	}
	api.node = node1("10.211.1.0/24")
	h.pass()
	h.pass()
	if rip.calls != 1 || len(ev.onNode) != 0 {
		t.Fatalf("first sight of the Node: %d calls, events %v; want 1 call, no event", rip.calls, ev.onNode)
	}
	rip.entries = []reservation.Entry{
		timed(entry("cbr0", "10.211.1.2", reservation.Reserved, "", "db/db-0", h.now), h.now.Add(5*time.Minute)),
		entry("cbr0", "10.211.1.3", reservation.Allocated, "c1", "db/web", h.now),
	}
	api.node = node1("10.211.3.0/24") // registered again
	h.pass()
	h.pass()
	if rip.calls != 2 || len(ev.onNode) != 1 {
		t.Fatalf("after the change: %d calls, events %v; want 2 calls, one event", rip.calls, ev.onNode)
	}
	for _, want := range []string{"PodCIDRChanged", "10.211.3.0/24", "10.211.1.0/24", "10.211.1.2 db/db-0 (reserved, network cbr0)"} {
		if !strings.Contains(ev.onNode[0], want) {
			t.Errorf("event %q does not say %q", ev.onNode[0], want)
		}
	}
	if n := testutil.ToFloat64(h.m.NodeRangeChanges); n != 1 {
		t.Errorf("node_pod_cidr_changes_total = %v, want 1", n)
	}

	// The saved lease of the old range is never put back.
	v, _ := rip.Observe()
	check := flannel.IPAMCheck(func() (*ipamstore.View, error) { return v, nil }, func(*ipamstore.View) []string { return []string{"cbr0"} })
	old, err := contract.ParseFlannelLease([]byte("FLANNEL_NETWORK=10.211.0.0/16\nFLANNEL_SUBNET=10.211.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := check(old); err == nil || !strings.Contains(err.Error(), "no longer has") {
		t.Errorf("lease check of the old range: %v, want a refusal", err)
	}
}
