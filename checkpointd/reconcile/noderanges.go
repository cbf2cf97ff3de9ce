package reconcile

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// NodeWatcher is implemented by APIs that watch the node's own Node
// (package kube).
type NodeWatcher interface {
	// NodePodCIDRs returns the Node and its pod CIDRs; false while unknown.
	NodePodCIDRs() (*corev1.Node, []netip.Prefix, bool)
}

// RangeKeeper is implemented by IPAMs that record the node's pod ranges
// (package ipamstore).
type RangeKeeper interface {
	// SetNodeRangesIn records the Node's pod CIDRs in the networks v read;
	// the engine retires the ranges the node no longer has and drops what
	// they held.
	SetNodeRangesIn(v *ipamstore.View, current []netip.Prefix) (ipam.NodeRanges, []reservation.Entry, bool, error)
}

// NodeEvents posts Events on the node's Node (package kube's Recorder).
type NodeEvents interface {
	NodeEvent(node *corev1.Node, eventType, reason, message string)
}

// nodeRanges records the Node's pod CIDRs, as the API server last showed
// them, in the IPAM store, before the flannel lease is kept (a lease of a
// retired range is never put back). When they changed (the Node was
// registered again with another podCIDR), it says so in the log and in an
// Event on the Node, naming every address dropped.
func (r *Reconciler) nodeRanges(s *snapshot) {
	nw, ok := r.cfg.API.(NodeWatcher)
	rk, ok2 := r.cfg.IPAM.(RangeKeeper)
	if !ok || !ok2 || s.ipam == nil {
		return
	}
	node, cidrs, known := nw.NodePodCIDRs()
	if !known || len(cidrs) == 0 {
		return // no podCIDR allocated (yet): nothing to say about ranges
	}
	prev := s.ipam.Ranges
	if samePrefixes(prev.Current, cidrs) {
		return
	}
	now, dropped, changed, err := rk.SetNodeRangesIn(s.ipam, cidrs)
	if err != nil {
		r.problem(checkpoint.ID{}, "node-ranges", "recording the node's pod CIDRs", err)
	} else {
		r.solved(checkpoint.ID{}, "node-ranges")
	}
	if !changed {
		return
	}
	if len(prev.Current) == 0 {
		r.cfg.Log.Info("node pod CIDRs recorded", "podCIDRs", now.Current)
		return
	}
	var addrs []string
	for _, e := range dropped {
		who := e.Identity.Pod()
		if e.Identity.IsZero() {
			who = e.LastIdentity.Pod()
		}
		addrs = append(addrs, fmt.Sprintf("%s %s (%s, network %s)", e.IP, who, e.State, e.Network))
	}
	msg := fmt.Sprintf("the node's pod CIDRs are now %v, were %v: no address of %v is handed out, reserved or published again",
		now.Current, prev.Current, now.Retired)
	if len(addrs) > 0 {
		msg += "; dropped " + strings.Join(addrs, ", ")
	}
	r.cfg.Log.Warn("node pod CIDRs changed", "podCIDRs", now.Current, "were", prev.Current, "retired", now.Retired, "dropped", addrs)
	r.cfg.Metrics.NodeRangeChanges.Inc()
	if ev, ok := r.cfg.Events.(NodeEvents); ok && node != nil {
		ev.NodeEvent(node, corev1.EventTypeWarning, "PodCIDRChanged", msg)
	}
}

func samePrefixes(a, b []netip.Prefix) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(p netip.Prefix) bool { return !slices.Contains(b, p) })
}
