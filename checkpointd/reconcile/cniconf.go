package reconcile

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/ipam"
)

// Event reasons checkpointd posts on its Node about the CNI configuration.
const (
	EventNotConfigured = "StickyipNotConfigured"
	EventConfigured    = "StickyipConfigured"
)

// cniState is what cniConfig remembers between passes. A finding is
// identified by its networks and what the configuration has for each
// instead (findingKey), not by its counts, which change as pods come and go.
type cniState struct {
	last     string // the finding of the last pass ("" none)
	reported string // the finding last logged ("" none)
	message  string // what was logged for it
	evented  string // the finding last posted as an Event on the Node
}

// cniConfig notices a conflist that no longer names stickyip (or names
// another data directory) while the store holds sticky records — a flannel
// chart upgrade that put its own cni-conf.json back, a k3s restarted
// without --flannel-cni-conf — and says so instead of letting the node go
// back to another IPAM in silence: the gauge
// checkpointd_ipam_unconfigured_sticky_ips per network at every pass, and,
// once the finding has held for two passes in a row (a conflist being
// rewritten is not a finding), a warning in the log and an Event on the
// Node (posted once the API server answers); and again when it is fixed.
func (r *Reconciler) cniConfig(s *snapshot) {
	if s.ipam == nil {
		return // the store could not be read (reconcileIPAM says so)
	}
	if err := s.ipam.ConfErr; err != nil {
		r.problem(checkpoint.ID{}, "cni-config", "cannot compare the CNI configuration with the IPAM store", err)
		return
	}
	found := s.ipam.Unconfigured
	r.solved(checkpoint.ID{}, "cni-config")
	g := r.cfg.Metrics.UnconfiguredSticky
	g.Reset()
	for _, u := range found {
		g.WithLabelValues(u.Network).Set(float64(u.Reserved + u.Sticky))
	}
	key := findingKey(found)
	st := &r.cni
	stable := key == st.last
	st.last = key
	if !stable || key == st.reported {
		r.postCNIEvent(s)
		return
	}
	if key != "" {
		st.message = unconfiguredMessage(found)
		r.cfg.Log.Warn("the CNI configuration no longer uses stickyip for networks whose store holds sticky records", "detail", st.message)
	} else {
		r.cfg.Log.Info("the CNI configuration uses stickyip again for every network whose store holds sticky records", "was", st.message)
		st.message = ""
	}
	st.reported = key
	r.postCNIEvent(s)
}

// findingKey identifies a finding: its networks and what the
// configuration has for each.
func findingKey(found []ipam.UnconfiguredNetwork) string {
	var parts []string
	for _, u := range found {
		parts = append(parts, u.Network+"\x00"+u.Now)
	}
	return strings.Join(parts, "\x00\x00")
}

// postCNIEvent posts the reported finding on the Node unless it was
// already posted; only while the API server answers (an Event sent during
// an outage is dropped), so a finding made offline is posted on return.
func (r *Reconciler) postCNIEvent(s *snapshot) {
	st := &r.cni
	ev, ok := r.cfg.Events.(NodeEvents)
	if !ok || st.reported == st.evented || !s.api.Up() {
		return
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Node}}
	if nw, ok := r.cfg.API.(NodeWatcher); ok {
		if n, _, known := nw.NodePodCIDRs(); known && n != nil {
			node = n
		}
	}
	if st.reported == "" {
		ev.NodeEvent(node, corev1.EventTypeNormal, EventConfigured, "the CNI configuration uses stickyip again for every network whose store holds reservations")
	} else {
		ev.NodeEvent(node, corev1.EventTypeWarning, EventNotConfigured, st.message)
	}
	st.evented = st.reported
}

// unconfiguredMessage says what is wrong and what to do, or "".
func unconfiguredMessage(found []ipam.UnconfiguredNetwork) string {
	if len(found) == 0 {
		return ""
	}
	var parts []string
	for _, u := range found {
		parts = append(parts, fmt.Sprintf("network %s holds %d reservations and %d running pods that leave one at deletion, but %s", u.Network, u.Reserved, u.Sticky, u.Now))
	}
	return strings.Join(parts, "; ") + ": new pods get their addresses from another IPAM, which may hand out an address stickyip holds, and no reservation is kept." +
		" Put stickyip back in the node's conflist (docs/install.md: flannel's chart needs -f deploy/kube-flannel/values.yaml or --reuse-values on every upgrade), or, to uninstall, release the reservations (stickyip release)."
}
