package kube

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/apiclient/apitest"
)

// Issue 51: the StatefulSets of the cluster are watched, one watch for
// all, and kept as what checkpointd reads of them (no annotations, whose
// last-applied-configuration holds the whole manifest); a change is seen
// through the watch. Until the first list nothing is known; a refused list
// (no RBAC) leaves it so.
func TestStatefulSetWatch(t *testing.T) {
	three := int32(3)
	srv := apitest.New(t, &apiclient.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod",
		Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"template":"…"}}`}},
		Spec: apiclient.StatefulSetSpec{Replicas: &three, PersistentVolumeClaimRetentionPolicy: &apiclient.PVCRetentionPolicy{WhenScaled: "Delete"}}})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := New(client(t, srv), Options{Node: "node1", ProbeInterval: 10 * time.Millisecond, Timeout: time.Second, Log: quiet, StatefulSets: true})
	if _, synced := c.StatefulSet("prod", "db"); synced || c.StatefulSetsSynced() {
		t.Fatal("synced before the watch ran")
	}
	run(t, c)
	eventually(t, "StatefulSets listed", c.StatefulSetsSynced)
	s, _ := c.StatefulSet("prod", "db")
	if s == nil || *s.Spec.Replicas != 3 || s.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled != "Delete" || s.UID == "" || len(s.Annotations) != 0 {
		t.Fatalf("StatefulSet prod/db: %+v", s)
	}
	if other, synced := c.StatefulSet("prod", "other"); other != nil || !synced {
		t.Fatalf("a StatefulSet that does not exist: %+v, synced %v", other, synced)
	}
	one := int32(1)
	srv.Put(&apiclient.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod", UID: s.UID}, Spec: apiclient.StatefulSetSpec{Replicas: &one}})
	eventually(t, "the scale-down seen", func() bool { s, _ := c.StatefulSet("prod", "db"); return s != nil && *s.Spec.Replicas == 1 })
	srv.Delete(apiclient.StatefulSets, "prod", "db")
	eventually(t, "the deletion seen", func() bool { s, synced := c.StatefulSet("prod", "db"); return s == nil && synced })

	// Without the RBAC: refused, never synced, nothing known.
	srv2 := apitest.New(t)
	srv2.Refuse("list", apiclient.StatefulSets, http.StatusForbidden)
	srv2.Refuse("watch", apiclient.StatefulSets, http.StatusForbidden)
	c2 := New(client(t, srv2), Options{Node: "node1", ProbeInterval: 10 * time.Millisecond, Timeout: time.Second, Log: quiet, StatefulSets: true})
	run(t, c2)
	eventually(t, "the list refused", func() bool { return srv2.Refusals() > 0 })
	if c2.StatefulSetsSynced() {
		t.Fatal("synced although every list was refused")
	}
}

// run runs c until the test ends.
func run(t *testing.T, c *Client) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}
