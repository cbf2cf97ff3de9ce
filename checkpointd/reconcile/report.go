package reconcile

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/policy"
)

// Event reasons checkpointd posts on pods.
const (
	EventSaved      = "CheckpointSaved"
	EventRefused    = "CheckpointRefused"
	EventFailed     = "CheckpointFailed"
	EventHandedBack = "CheckpointHandedBack"
	EventReleased   = "CheckpointReleased"
)

// reported returns where problems of id (the daemon's own with a zero id)
// are remembered, by topic.
func (r *Reconciler) reported(id checkpoint.ID) map[string]string {
	if id == (checkpoint.ID{}) {
		return r.node
	}
	return r.mem(id).reported
}

// problem reports a failure of one step for one pod (or, with a zero id, of
// the daemon's own bookkeeping): logged and counted once per distinct
// message, retried by the next pass, never the daemon's health.
func (r *Reconciler) problem(id checkpoint.ID, topic, msg string, err error) {
	text := msg
	if err != nil {
		text += ": " + err.Error()
	}
	seen := r.reported(id)
	if seen[topic] == text {
		return
	}
	seen[topic] = text
	r.cfg.Metrics.PodErrors.WithLabelValues(topic).Inc()
	args := []any{"step", topic}
	if id != (checkpoint.ID{}) {
		args = append(args, "pod", id.String())
	}
	if err != nil {
		args = append(args, "err", err)
	}
	r.cfg.Log.Error(msg+"; will retry", args...)
}

// solved forgets a reported problem once its step succeeds, and says so.
func (r *Reconciler) solved(id checkpoint.ID, topic string) {
	seen := r.reported(id)
	if _, ok := seen[topic]; ok {
		delete(seen, topic)
		r.cfg.Log.Info("step succeeds again", "step", topic, "pod", id.String())
	}
}

// note logs msg once while detail stays the same (warnings about a pod
// that do not stop anything).
func (r *Reconciler) note(id checkpoint.ID, topic, msg, detail string) {
	seen := r.reported(id)
	if seen[topic] == detail {
		return
	}
	seen[topic] = detail
	r.cfg.Log.Warn(msg, "pod", id.String(), "detail", detail)
}

// event posts an Event on pod while the API server answers (an Event sent
// during an outage would only be retried and dropped).
func (r *Reconciler) event(s *snapshot, pod *corev1.Pod, eventType, reason, format string, args ...any) {
	if r.cfg.Events == nil || pod == nil || !s.api.Up() {
		return
	}
	r.cfg.Events.Event(pod, eventType, reason, fmt.Sprintf(format, args...))
}

// refuse reports that the operator's policy refuses a parent: once per pod
// UID and reason (log, metric, Event).
func (r *Reconciler) refuse(s *snapshot, id checkpoint.ID, v policy.Verdict) {
	p := s.parents[id]
	seen := r.mem(id).reported
	mark := string(p.UID) + "\x00" + v.Detail
	if seen["refused"] == mark {
		return
	}
	seen["refused"] = mark
	r.cfg.Metrics.Refusals.WithLabelValues(v.Reason).Inc()
	r.cfg.Log.Warn("pod opted in to checkpointing but the node's policy refuses it", "pod", id.String(), "reason", v.Reason, "detail", v.Detail)
	r.event(s, p, corev1.EventTypeWarning, EventRefused, "checkpointd on node %s will not checkpoint this pod: %s", r.cfg.Node, v.Detail)
}

// reportCorrupt reports checkpoint files that failed verification (List has
// set them aside).
func (r *Reconciler) reportCorrupt(s *snapshot) {
	for _, c := range s.corrupt {
		r.cfg.Metrics.CorruptTotal.Inc()
		r.cfg.Log.Error("corrupt checkpoint set aside; it will not be restored", "file", c.Path, "movedTo", c.MovedTo, "err", c.Err)
	}
}
