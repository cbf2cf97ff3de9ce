package placement

import (
	"context"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// The watch says when the record changed (the retention follower then
// applies a new verdict at once, not at its next tick): once for what it
// listed, again for each change of the record it then sees.
func TestWatcherSaysTheRecordChanged(t *testing.T) {
	srv := kubetest.New(t)
	rec := func(why string) *placementv1.NodeRecord {
		return &placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Spec: placementv1.NodeRecordSpec{NodeUID: "n1"},
			Status: placementv1.NodeRecordStatus{NodeUID: "n1", Claims: []placementv1.Claim{{Namespace: "db", Identity: "db-0", PodUID: "p0",
				StatefulSet: &placementv1.Retention{Name: "db", UID: "s1", Verdict: placementv1.Hold, Why: why}}}}}
	}
	srv.Put(rec("kept"))
	w := NewWatcher(client(t, srv), "node1", slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	said := func(what string) {
		t.Helper()
		select {
		case <-w.Changed():
		case <-time.After(20 * time.Second):
			t.Fatalf("the watcher did not say %s", what)
		}
	}
	said("that it listed the record")
	waitFor(t, "the record listed", func() bool { r, listed := w.Record(); return listed && r != nil })
	srv.Put(rec("released"))
	said("that the record changed")
	waitFor(t, "the change seen", func() bool { r, _ := w.Record(); return r.Status.Claims[0].StatefulSet.Why == "released" })
}
