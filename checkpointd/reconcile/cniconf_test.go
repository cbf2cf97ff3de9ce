package reconcile

import (
	"errors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/ipam"
)

// configIPAM is the fake IPAM whose store the CNI configuration may no
// longer use (what ipam.UnconfiguredNetworks finds is tested in package
// ipam).
type configIPAM struct {
	*fakeIPAM
	found []ipam.UnconfiguredNetwork
	err   error
}

func (f *configIPAM) Observe() (*ipamstore.View, error) {
	v, err := f.fakeIPAM.Observe()
	v.Unconfigured, v.ConfErr = f.found, f.err
	return v, err
}

// A conflist switched back to host-local while the store holds
// reservations is said: the gauge at once, the log and a Warning Event on
// the Node once it held for two passes (a conflist being rewritten is not
// a finding), once, whatever the counts do; when it is fixed, an Event
// says so; a finding made with the API server away is posted when it
// answers again.
func TestCNIConfigSwitchedAway(t *testing.T) {
	h := newHarness(t)
	api := &nodeAPI{fakeAPI: h.api, node: node1("10.244.1.0/24")}
	ci := &configIPAM{fakeIPAM: h.ipam}
	ev := &nodeEvents{fakeEvents: h.events}
	h.cfg.API, h.cfg.IPAM, h.cfg.Events = api, ci, ev
	h.start()
	gauge := func() float64 { return testutil.ToFloat64(h.m.UnconfiguredSticky.WithLabelValues("cbr0")) }

	h.pass()
	h.pass()
	if len(ev.onNode) != 0 || testutil.CollectAndCount(h.m.UnconfiguredSticky) != 0 {
		t.Fatalf("nothing unconfigured: events %v, %d series", ev.onNode, testutil.CollectAndCount(h.m.UnconfiguredSticky))
	}

	switched := ipam.UnconfiguredNetwork{Network: "cbr0", Reserved: 2, Sticky: 1, Now: "/etc/cni/net.d/10-flannel.conflist gives it IPAM host-local (the flannel plugin's default)"}
	// One pass only (the conflist rewritten, then back): the gauge, no Event.
	ci.found = []ipam.UnconfiguredNetwork{switched}
	h.pass()
	if gauge() != 3 || len(ev.onNode) != 0 {
		t.Fatalf("first pass: gauge %v, events %v; want 3, none", gauge(), ev.onNode)
	}
	ci.found = nil
	h.pass()
	h.pass()
	if len(ev.onNode) != 0 || testutil.CollectAndCount(h.m.UnconfiguredSticky) != 0 {
		t.Fatalf("a one-pass finding was reported: events %v", ev.onNode)
	}

	ci.found = []ipam.UnconfiguredNetwork{switched}
	h.pass()
	h.pass()
	if len(ev.onNode) != 1 {
		t.Fatalf("switched away for two passes: events %v, want one", ev.onNode)
	}
	for _, want := range []string{"node1 StickyipNotConfigured", "network cbr0 holds 2 reservations and 1 running pods", "IPAM host-local", "docs/install.md", "stickyip release"} {
		if !strings.Contains(ev.onNode[0], want) {
			t.Errorf("event %q does not say %q", ev.onNode[0], want)
		}
	}
	// The counts change as pods come and go: the same finding, no new Event.
	ci.found[0].Reserved = 1
	h.pass()
	h.pass()
	if len(ev.onNode) != 1 || gauge() != 2 {
		t.Fatalf("counts changed: events %v, gauge %v; want still one event, gauge 2", ev.onNode, gauge())
	}

	// Fixed while the API server is away: logged, posted once it answers.
	api.reachable = false
	ci.found = nil
	h.pass()
	h.pass()
	if len(ev.onNode) != 1 || testutil.CollectAndCount(h.m.UnconfiguredSticky) != 0 {
		t.Fatalf("fixed, API away: events %v", ev.onNode)
	}
	api.reachable = true
	h.pass()
	if len(ev.onNode) != 2 || !strings.Contains(ev.onNode[1], "StickyipConfigured") {
		t.Fatalf("fixed, API back: events %v; want a StickyipConfigured", ev.onNode)
	}

	// The comparison itself failing is a problem of the pass, counted once.
	ci.err = errors.New("store locked")
	h.pass()
	h.pass()
	if n := testutil.ToFloat64(h.m.PodErrors.WithLabelValues("cni-config")); n != 1 {
		t.Errorf("pod_errors_total{step=cni-config} = %v, want 1", n)
	}
}
