package kube

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Recorder posts Events about pods, as component "checkpointd" on the node.
// The node's own identity may create them (the Node authorizer's rules).
type Recorder struct {
	rec  record.EventRecorder
	stop func()
}

// NewRecorder starts an event broadcaster writing to cs.
func NewRecorder(cs kubernetes.Interface, node string, log *slog.Logger) *Recorder {
	b := record.NewBroadcaster()
	w := b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "checkpointd", Host: node})
	return &Recorder{rec: rec, stop: func() { w.Stop(); b.Shutdown() }}
}

// Event posts an Event on pod (only its reference is used).
func (r *Recorder) Event(pod *corev1.Pod, eventType, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	r.rec.Event(ref, eventType, reason, message)
}

// NodeEvent posts an Event on node (only its reference is used).
func (r *Recorder) NodeEvent(node *corev1.Node, eventType, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	r.rec.Event(ref, eventType, reason, message)
}

// Stop flushes and stops the broadcaster.
func (r *Recorder) Stop() { r.stop() }
