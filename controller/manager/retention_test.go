package manager

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// retentionOf returns the retention of record n1's claim of identity.
func (h *harness) retentionOf(identity string) *placementv1.Retention {
	if c := h.claim("n1", "ns", identity); c != nil {
		return c.StatefulSet
	}
	return nil
}

func (h *harness) waitRetention(identity, owner, verdict, why string) {
	h.t.Helper()
	poll(h.t, identity+" "+verdict+" (owner "+owner+")", func() bool {
		r := h.retentionOf(identity)
		return r != nil && r.Owner == owner && r.Verdict == verdict && strings.Contains(r.Why, why)
	})
}

func (h *harness) updateSet(s *appsv1.StatefulSet) {
	h.t.Helper()
	if err := h.kube.Tracker().Update(setsGVR, s, s.Namespace); err != nil {
		h.t.Fatal(err)
	}
}

// A StatefulSet pod's claim follows its volume claims' owner: recomputed
// while the pod lives (a scale-down with whenScaled Delete condemns it),
// frozen once it is gone (a policy edited afterwards changes nothing),
// released with a background deletion, kept with an orphaning one.
func TestRetentionFollowsStatefulSet(t *testing.T) {
	db := statefulSet("ns", "db", "s-db", 2, "Delete", "Retain")
	web := statefulSet("ns", "web", "s-web", 1, "Retain", "Delete")
	kv := statefulSet("ns", "kv", "s-kv", 1, "Retain", "Delete")
	h := newHarness(t, node("n1", "nu1"), db, web, kv,
		pod("ns", "db-0", "p0", "n1", 0, ofSet("db", "s-db")), pod("ns", "db-1", "p1", "n1", 0, ofSet("db", "s-db")),
		pod("ns", "web-0", "pw", "n1", 0, ofSet("web", "s-web")), pod("ns", "kv-0", "pk", "n1", 0, ofSet("kv", "s-kv")),
		pod("ns", "fixed-0", "pf", "n1", 0, ofSet("db", "s-db"), annotated("stickyip.io/retention", "fixed")))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p0", true), entry("ns", "db-1", "db-1", "p1", true),
		entry("ns", "web-0", "web-0", "pw", true), entry("ns", "kv-0", "kv-0", "pk", true), entry("ns", "fixed-0", "fixed-0", "pf", true)))
	h.waitRetention("db-1", "", placementv1.Hold, "nothing deletes")
	h.waitRetention("web-0", placementv1.OwnerStatefulSet, placementv1.Hold, "kept while StatefulSet web")
	if r := h.retentionOf("fixed-0"); r != nil {
		t.Fatalf("a fixed pod's claim follows %+v", r)
	}

	// Scaled to 1 with whenScaled Delete: db-1 is condemned, released once gone.
	one := int32(1)
	db.Spec.Replicas = &one
	h.updateSet(db)
	h.waitRetention("db-1", placementv1.OwnerPod, placementv1.Hold, "released once the pod is gone")
	if err := h.kube.Tracker().Delete(podsGVR, "ns", "db-1"); err != nil {
		t.Fatal(err)
	}
	h.waitRetention("db-1", placementv1.OwnerPod, placementv1.Release, "went with it")
	// db-0 gone in range: owner none, frozen; a policy edited afterwards changes nothing.
	if err := h.kube.Tracker().Delete(podsGVR, "ns", "db-0"); err != nil {
		t.Fatal(err)
	}
	poll(t, "db-0 seen gone", func() bool { p, _ := h.m.seen.tomb("p0"); return p != nil })
	db.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	zero := int32(0)
	db.Spec.Replicas = &zero
	h.updateSet(db)
	h.waitRetention("db-0", "", placementv1.Hold, "nothing deletes")

	// web: its pod gone, then the StatefulSet deleted with --cascade=orphan.
	if err := h.kube.Tracker().Delete(podsGVR, "ns", "web-0"); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now())
	web.DeletionTimestamp, web.Finalizers = &now, []string{metav1.FinalizerOrphanDependents}
	h.updateSet(web)
	h.waitRetention("web-0", "", placementv1.Hold, "--cascade=orphan")
	if err := h.kube.Tracker().Delete(setsGVR, "ns", "web"); err != nil {
		t.Fatal(err)
	}
	// kv: its pod gone, then the StatefulSet deleted in the background.
	if err := h.kube.Tracker().Delete(podsGVR, "ns", "kv-0"); err != nil {
		t.Fatal(err)
	}
	h.waitRetention("kv-0", placementv1.OwnerStatefulSet, placementv1.Hold, "kept while StatefulSet kv")
	if err := h.kube.Tracker().Delete(setsGVR, "ns", "kv"); err != nil {
		t.Fatal(err)
	}
	h.waitRetention("kv-0", placementv1.OwnerStatefulSet, placementv1.Release, "was deleted (whenDeleted: Delete)")
	if r := h.retentionOf("web-0"); r.Owner != "" || r.Verdict != placementv1.Hold {
		t.Fatalf("web-0 after its StatefulSet went: %+v", r)
	}
}

// A StatefulSet deleted while no controller ran: orphaned if a pod of its
// names is still there, adopted by the one created since; released if not.
func TestRetentionDeletionUnseen(t *testing.T) {
	yes := true
	old := statefulSet("ns", "db", "s-old", 3, "Retain", "Delete")
	h := newHarness(t, node("n1", "nu1"), old, statefulSet("ns", "kv", "s-kv", 1, "Retain", "Delete"),
		pod("ns", "db-0", "p0", "n1", 0, ofSet("db", "s-old")), pod("ns", "db-1", "p1", "n1", 0, ofSet("db", "s-old")),
		pod("ns", "kv-0", "pk", "n1", 0, ofSet("kv", "s-kv")))
	cfg := testConfig()
	h.ready(cfg)
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-1", "db-1", "p1", true), entry("ns", "kv-0", "kv-0", "pk", true)))
	h.waitRetention("db-1", placementv1.OwnerStatefulSet, placementv1.Hold, "kept while")
	h.waitRetention("kv-0", placementv1.OwnerStatefulSet, placementv1.Hold, "kept while")
	h.halt()
	// Meanwhile: db-1 and kv-0 go; db is orphan-deleted and created again
	// (it adopts db-0); kv is deleted in the background.
	for _, p := range []string{"db-1", "kv-0"} {
		if err := h.kube.Tracker().Delete(podsGVR, "ns", p); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"db", "kv"} {
		if err := h.kube.Tracker().Delete(setsGVR, "ns", s); err != nil {
			t.Fatal(err)
		}
	}
	recreated := statefulSet("ns", "db", "s-new", 3, "Retain", "Delete")
	recreated.CreationTimestamp = metav1.NewTime(time.Now())
	h.create(recreated)
	adopted := pod("ns", "db-0", "p0", "n1", 0, ofSet("db", "s-new"))
	adopted.OwnerReferences[0].Controller = &yes
	if err := h.kube.Tracker().Update(podsGVR, adopted, "ns"); err != nil {
		t.Fatal(err)
	}
	h.ready(cfg)
	h.waitRetention("db-1", "", placementv1.Hold, "--cascade=orphan")
	h.waitRetention("kv-0", placementv1.OwnerStatefulSet, placementv1.Release, "was deleted")
}
