package api_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
	"github.com/stickyip/stickyip/controller/api/apitest"
)

// poll waits for cond, failing the test after a deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecords(t *testing.T) {
	srv := apitest.New(t)
	c, err := api.New(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.PutRecord(&placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: placementv1.NodeRecordSpec{NodeUID: "u1"}})
	inf := cache.NewSharedIndexInformer(c.RecordsListWatch(), &placementv1.NodeRecord{}, 0, cache.Indexers{})
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("no sync")
	}
	if _, ok, _ := inf.GetStore().GetByKey("n1"); !ok {
		t.Fatal("the listed record is not in the informer")
	}
	// A record written after the list reaches the informer through the watch.
	srv.PutRecord(&placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: placementv1.NodeRecordSpec{NodeUID: "u2"}})
	poll(t, "n2 in the informer", func() bool { _, ok, _ := inf.GetStore().GetByKey("n2"); return ok })

	// A status patch changes the status alone.
	out, err := c.PatchRecordStatus(ctx, "n1", []byte(`{"status":{"nodeUID":"u1","claims":[{"namespace":"ns","identity":"db-0","refused":"x"}]},"spec":{"nodeUID":"evil"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if out.Status.NodeUID != "u1" || len(out.Status.Claims) != 1 || out.Spec.NodeUID != "u1" {
		t.Fatalf("after the status patch: %+v", out)
	}
	if n := srv.Writes("patch", apitest.RecordsStatus); n != 1 {
		t.Fatalf("%d status patches counted", n)
	}
	poll(t, "the status in the informer", func() bool {
		o, _, _ := inf.GetStore().GetByKey("n1")
		return len(o.(*placementv1.NodeRecord).Status.Claims) == 1
	})
	// A deletion with a stale UID is refused; with the record's, done.
	if err := c.DeleteRecord(ctx, "n1", "other"); !apierrors.IsConflict(err) {
		t.Fatalf("delete with a stale uid: %v", err)
	}
	if err := c.DeleteRecord(ctx, "n1", out.UID); err != nil {
		t.Fatal(err)
	}
	poll(t, "n1 gone from the informer", func() bool { _, ok, _ := inf.GetStore().GetByKey("n1"); return !ok })
}
