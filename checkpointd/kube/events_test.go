package kube

import (
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
)

// events returns the Events the server holds, by reason.
func events(srv *kubetest.Server) map[string]*corev1.Event {
	out := map[string]*corev1.Event{}
	for _, o := range srv.Objects(Events) {
		e := o.(*corev1.Event)
		out[e.Reason] = e
	}
	return out
}

// Events on a pod and on the Node arrive as client-go's recorder made them
// (the e2e reads them by namespace, involved object and reason); Stop posts
// what is still queued.
func TestRecorderPostsEvents(t *testing.T) {
	srv := kubetest.New(t)
	r := NewRecorder(client(t, srv), "node1", time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "kube-system", UID: "u1"}}
	r.Event(pod, corev1.EventTypeWarning, "CheckpointRefused", "no")
	r.NodeEvent(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "n1"}}, corev1.EventTypeNormal, "StoreRebuilt", "yes")
	r.Stop()
	got := events(srv)
	p, n := got["CheckpointRefused"], got["StoreRebuilt"]
	if p == nil || n == nil {
		t.Fatalf("Events after Stop: %v, want CheckpointRefused and StoreRebuilt", got)
	}
	if p.Namespace != "kube-system" || p.InvolvedObject.Kind != "Pod" || p.InvolvedObject.Name != "app" || p.InvolvedObject.UID != "u1" ||
		p.Type != corev1.EventTypeWarning || p.Message != "no" || p.Count != 1 || p.Source.Component != "checkpointd" || p.Source.Host != "node1" {
		t.Errorf("pod Event = %+v", p)
	}
	if n.Namespace != metav1.NamespaceDefault || n.InvolvedObject.Kind != "Node" || n.InvolvedObject.Name != "node1" || n.LastTimestamp.IsZero() {
		t.Errorf("Node Event = %+v", n)
	}
}

// An Event the API server cannot take now (503) is posted again; one it
// refuses (403) is not.
func TestRecorderTriesAgain(t *testing.T) {
	srv := kubetest.New(t)
	srv.Refuse("create", Events, 503)
	r := NewRecorder(client(t, srv), "node1", time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer r.Stop()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "kube-system"}}
	r.Event(pod, corev1.EventTypeNormal, "CheckpointSaved", "saved")
	eventually(t, "the first post refused", func() bool { return srv.Refusals() == 1 })
	srv.Refuse("create", Events, 0)
	eventually(t, "the Event posted again", func() bool { return events(srv)["CheckpointSaved"] != nil })

	// Events are posted one after another: had the refused one been tried
	// again, it would be there (the refusal lifted) before the next.
	srv.Refuse("create", Events, 403)
	r.Event(pod, corev1.EventTypeNormal, "CheckpointHandedBack", "back")
	eventually(t, "the post refused", func() bool { return srv.Refusals() == 2 })
	srv.Refuse("create", Events, 0)
	r.Event(pod, corev1.EventTypeNormal, "CheckpointReleased", "released")
	eventually(t, "the next Event posted", func() bool { return events(srv)["CheckpointReleased"] != nil })
	if e := events(srv)["CheckpointHandedBack"]; e != nil {
		t.Errorf("the Event the API server refused (403) was posted again: %+v", e)
	}
}
