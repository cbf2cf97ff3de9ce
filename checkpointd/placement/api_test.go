package placement

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
	"github.com/stickyip/stickyip/contract/placementv1"
)

func client(t *testing.T, srv *kubetest.Server) *kube.REST {
	t.Helper()
	c, err := kube.NewREST(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The node's requests as the API server gets them: the first write
// creates the record, later ones patch its spec (its status, the
// controller's, stays), a record that does not exist reads as none, and
// an API server without the placement API says so (not "no record").
func TestAPIPublish(t *testing.T) {
	srv := kubetest.New(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{FormerAnnotation: "db/05"}}})
	api := NewAPI(client(t, srv), "node1")
	ctx := context.Background()
	if r, err := api.Get(ctx); r != nil || err != nil {
		t.Fatalf("Get before any write: %v, %v; want none", r, err)
	}
	spec := placementv1.NodeRecordSpec{NodeUID: "n1", Entries: []placementv1.Entry{{Namespace: "db", Identity: "db-0", Pod: "db-0", PodUID: "p0",
		Since: metav1.NewTime(now), Addresses: []string{"10.0.0.2"}}}}
	if _, err := api.Publish(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// The controller's verdict, then the node's next write.
	stored := srv.Objects(placementv1.NodeRecordResource)[0].(*placementv1.NodeRecord)
	stored.Status = placementv1.NodeRecordStatus{NodeUID: "n1", Claims: []placementv1.Claim{{Namespace: "db", Identity: "db-0", PodUID: "p0", Indexed: true}}}
	srv.Put(stored)
	spec.Entries[0].Until = &metav1.Time{Time: now.Add(time.Hour)}
	r, err := api.Publish(ctx, spec)
	if err != nil || r.Spec.Entries[0].Until == nil || len(r.Status.Claims) != 1 {
		t.Fatalf("second write: %+v, %v; want the new end and the controller's status kept", r, err)
	}
	got, err := api.Get(ctx)
	if err != nil || got == nil || got.Name != "node1" || got.Spec.NodeUID != "n1" || !got.Spec.Entries[0].Until.Equal(spec.Entries[0].Until) {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	// The last entry released: the record holds none.
	if r, err := api.Publish(ctx, placementv1.NodeRecordSpec{NodeUID: "n1"}); err != nil || len(r.Spec.Entries) != 0 {
		t.Fatalf("writing no entries: %+v, %v; want the record emptied", r, err)
	}
	if got, _ := api.Get(ctx); got == nil || len(got.Spec.Entries) != 0 {
		t.Fatalf("after the last release the record holds %+v", got)
	}
	if err := api.(Former).ForgetFormer(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Refuse("patch", placementv1.NodeRecordResource, http.StatusNotFound)
	_, err = api.Publish(ctx, spec)
	if !resourceMissing(err) {
		t.Fatalf("Publish without the placement API: %v, want it named missing", err)
	}
}

// The watch of the node's record: its spec and status as written, and
// whether the API serves it — a refusal (no RBAC, no definitions) is
// known as such until the record is listed again; an API server not heard
// from yet is not known either way.
func TestWatcher(t *testing.T) {
	srv := kubetest.New(t)
	for _, verb := range []string{"list", "watch"} {
		srv.Refuse(verb, placementv1.NodeRecordResource, http.StatusForbidden)
	}
	w := NewWatcher(client(t, srv), "node1", slog.New(slog.DiscardHandler))
	if ok, known := w.Served(); ok || known {
		t.Fatalf("before any answer: served %v known %v, want neither", ok, known)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	waitFor(t, "the refusal known", func() bool { ok, known := w.Served(); return known && !ok })
	for _, verb := range []string{"list", "watch"} {
		srv.Refuse(verb, placementv1.NodeRecordResource, 0)
	}
	srv.Put(&placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "node1"}, Spec: placementv1.NodeRecordSpec{NodeUID: "n1"},
		Status: placementv1.NodeRecordStatus{NodeUID: "n1", Claims: []placementv1.Claim{{Namespace: "db", Identity: "db-0", PodUID: "p0"}}}})
	srv.Put(&placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "node2"}})
	waitFor(t, "the record served", func() bool {
		ok, _ := w.Served()
		r, listed := w.Record()
		return ok && listed && r != nil && len(r.Status.Claims) == 1
	})
	if r, _ := w.Record(); r.Name != "node1" {
		t.Fatalf("the watch shows %s's record, want node1's only", r.Name)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
