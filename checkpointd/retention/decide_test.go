package retention

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// statefulSet is StatefulSet db (uid u1) of replicas from start, with a
// retention policy (nil: none set).
func statefulSet(replicas, start int32, policy *apiclient.PVCRetentionPolicy) *apiclient.StatefulSet {
	s := &apiclient.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod", UID: "u1"},
		Spec: apiclient.StatefulSetSpec{Replicas: &replicas, PersistentVolumeClaimRetentionPolicy: policy}}
	if start != 0 {
		s.Spec.Ordinals = &apiclient.StatefulSetOrdinals{Start: start}
	}
	return s
}

func pvc(whenScaled, whenDeleted string) *apiclient.PVCRetentionPolicy {
	return &apiclient.PVCRetentionPolicy{WhenScaled: whenScaled, WhenDeleted: whenDeleted}
}

// heldRecord is db-<ordinal>'s held reservation, following StatefulSet db
// as recorded (uid u1 unless told).
func heldRecord(ordinal int, ref reservation.StatefulSetRef) *reservation.Record {
	if ref.Name == "" {
		ref.Name = "db"
	}
	return &reservation.Record{State: reservation.Reserved, Identity: reservation.Identity{Namespace: "prod", Name: fmt.Sprintf("db-%d", ordinal), IfName: "eth0"},
		Duration: 10 * time.Minute, ExpiresAt: t0.Add(-time.Hour), StatefulSet: &ref}
}

func actions(cs []ipam.RetentionChange) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Action.String())
	}
	return strings.Join(out, ",")
}

// TestDecide walks Decide's table: every StatefulSet state against every
// policy, the ordinal in and out of the range (spec.ordinals.start
// included), a UID not known (put back from the index), a StatefulSet
// re-created under the same name, a later claim by another node.
func TestDecide(t *testing.T) {
	retainRetain := reservation.StatefulSetRef{UID: "u1", WhenScaled: "Retain", WhenDeleted: "Retain"}
	deleteDelete := reservation.StatefulSetRef{UID: "u1", WhenScaled: "Delete", WhenDeleted: "Delete"}
	deleting := func(s *apiclient.StatefulSet) *apiclient.StatefulSet {
		at := metav1.NewTime(t0.Add(-time.Minute))
		s.DeletionTimestamp = &at
		return s
	}
	other := statefulSet(3, 0, nil)
	other.UID = "u2"
	for _, tc := range []struct {
		name      string
		ordinal   int
		recorded  reservation.StatefulSetRef
		set       *apiclient.StatefulSet
		claimedBy string
		want      string // the actions, in order
	}{
		{"in range, Retain", 2, retainRetain, statefulSet(3, 0, nil), "", ""},
		{"in range, Delete: the pod comes back", 2, deleteDelete, statefulSet(3, 0, pvc("Delete", "Delete")), "", ""},
		{"scaled down, whenScaled Retain", 2, retainRetain, statefulSet(1, 0, nil), "", ""},
		{"scaled to zero, whenScaled Retain", 0, retainRetain, statefulSet(0, 0, nil), "", ""},
		{"scaled down, whenScaled Delete", 2, deleteDelete, statefulSet(1, 0, pvc("Delete", "Delete")), "", "release"},
		{"scaled to zero, whenScaled Delete", 0, deleteDelete, statefulSet(0, 0, pvc("Delete", "Delete")), "", "release"},
		{"ordinals from 5: db-2 below the range, Delete", 2, deleteDelete, statefulSet(3, 5, pvc("Delete", "Delete")), "", "release"},
		{"ordinals from 5: db-7 in range", 7, deleteDelete, statefulSet(3, 5, pvc("Delete", "Delete")), "", ""},
		{"ordinals from 5: db-8 above, Delete", 8, deleteDelete, statefulSet(3, 5, pvc("Delete", "Delete")), "", "release"},
		{"policy changed to whenScaled Delete while scaled down", 2, retainRetain, statefulSet(1, 0, pvc("Delete", "")), "", "refresh,release"},
		{"policy changed, in range", 1, retainRetain, statefulSet(3, 0, pvc("", "Delete")), "", "refresh"},
		{"UID not known (from the index): learnt", 1, reservation.StatefulSetRef{}, statefulSet(3, 0, nil), "", "refresh"},
		{"UID not known, scaled down, Delete", 2, reservation.StatefulSetRef{}, statefulSet(1, 0, pvc("Delete", "Retain")), "", "refresh,release"},
		{"deleted, whenDeleted Delete", 1, deleteDelete, nil, "", "release"},
		{"deleted, whenDeleted Retain", 1, retainRetain, nil, "", "expire"},
		{"deleted, policy not known", 1, reservation.StatefulSetRef{UID: "u1"}, nil, "", "expire"},
		{"UID not known, none of that name", 1, reservation.StatefulSetRef{}, nil, "", "expire"},
		{"re-created (another UID), whenDeleted Delete", 1, deleteDelete, other, "", "release"},
		{"re-created (another UID), whenDeleted Retain", 1, retainRetain, other, "", "expire"},
		{"being deleted, whenDeleted Delete", 1, retainRetain, deleting(statefulSet(3, 0, pvc("Retain", "Delete"))), "", "refresh,release"},
		{"being deleted, whenDeleted Retain", 1, retainRetain, deleting(statefulSet(3, 0, nil)), "", "expire"},
		{"claimed later by node2, in range", 1, retainRetain, statefulSet(3, 0, nil), "node2", "expire"},
		{"claimed later by node2, scaled down with Delete: released", 2, deleteDelete, statefulSet(1, 0, pvc("Delete", "Delete")), "node2", "release"},
		{"claimed later by node2, deleted with Delete: released", 2, deleteDelete, nil, "node2", "release"},
		{"claimed later, policy changed", 1, retainRetain, statefulSet(3, 0, pvc("", "Delete")), "node2", "refresh,expire"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := heldRecord(tc.ordinal, tc.recorded)
			got := Decide(r, tc.set, tc.claimedBy, t0)
			if actions(got) != tc.want {
				t.Fatalf("Decide = %q (%+v), want %q", actions(got), got, tc.want)
			}
			for _, c := range got {
				if c.Namespace != "prod" || c.Name != r.Identity.Name {
					t.Fatalf("change %+v names another identity", c)
				}
				switch c.Action {
				case ipam.Refresh:
					if c.StatefulSet == nil || c.StatefulSet.UID != string(tc.set.UID) || c.StatefulSet.Name != "db" {
						t.Fatalf("refresh %+v: want StatefulSet db as the watch shows it", c.StatefulSet)
					}
				case ipam.Expire:
					if tc.set != nil && tc.set.DeletionTimestamp != nil && tc.claimedBy == "" {
						if !c.At.Equal(tc.set.DeletionTimestamp.Time) {
							t.Fatalf("expire at %v, want the deletion's time %v", c.At, tc.set.DeletionTimestamp.Time)
						}
					} else if !c.At.Equal(t0) {
						t.Fatalf("expire at %v, want now", c.At)
					}
					if c.MovedTo != tc.claimedBy {
						t.Fatalf("expire moved to %q, want %q", c.MovedTo, tc.claimedBy)
					}
				}
				if (c.Action == ipam.Release || c.Action == ipam.Expire) && c.Why == "" {
					t.Fatalf("%s without a reason for the log", c.Action)
				}
			}
		})
	}
	// Nothing but held reservations is decided on.
	for _, r := range []*reservation.Record{
		{State: reservation.Allocated, Identity: reservation.Identity{Namespace: "prod", Name: "db-2"}, Duration: time.Minute, StatefulSet: &deleteDelete},
		{State: reservation.Reserved, Identity: reservation.Identity{Namespace: "prod", Name: "db-2"}, Duration: time.Minute, Retention: "fixed", StatefulSet: &deleteDelete},
		{State: reservation.Reserved, Identity: reservation.Identity{Namespace: "prod", Name: "db-2"}, Duration: time.Minute},
	} {
		if got := Decide(r, nil, "node2", t0); len(got) != 0 {
			t.Errorf("Decide of %+v: %+v, want nothing", r, got)
		}
	}
}

// TestFollow: which StatefulSet a running pod's reservation follows.
func TestFollow(t *testing.T) {
	yes, no := true, false
	pod := func(name string, refs ...metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", UID: "p1", OwnerReferences: refs}}
	}
	ctrl := func(kind, apiVersion, name string, uid types.UID, controller *bool) metav1.OwnerReference {
		return metav1.OwnerReference{Kind: kind, APIVersion: apiVersion, Name: name, UID: uid, Controller: controller}
	}
	set := statefulSet(3, 0, pvc("Delete", ""))
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		set   *apiclient.StatefulSet
		want  string // "" none; else whenScaled/whenDeleted
		known bool
	}{
		{"a StatefulSet's pod", pod("db-1", ctrl("StatefulSet", "apps/v1", "db", "u1", &yes)), set, "Delete/Retain", true},
		{"its StatefulSet not seen yet", pod("db-1", ctrl("StatefulSet", "apps/v1", "db", "u1", &yes)), nil, "", false},
		{"the watch shows another UID (re-created)", pod("db-1", ctrl("StatefulSet", "apps/v1", "db", "u0", &yes)), set, "", false},
		{"a Deployment's pod", pod("web-5d8f7-x2b9q", ctrl("ReplicaSet", "apps/v1", "web-5d8f7", "r1", &yes)), nil, "", true},
		{"a bare pod", pod("db-1"), nil, "", true},
		{"an owner that is not its controller", pod("db-1", ctrl("StatefulSet", "apps/v1", "db", "u1", &no)), set, "", true},
		{"a StatefulSet of another group", pod("db-1", ctrl("StatefulSet", "apps.kruise.io/v1beta1", "db", "u1", &yes)), set, "", true},
		{"a bare pod naming the StatefulSet, not one of its names", pod("mine", ctrl("StatefulSet", "apps/v1", "db", "u1", &yes)), set, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, known := Follow(tc.pod, tc.set)
			got := ""
			if ref != nil {
				got = ref.WhenScaled + "/" + ref.WhenDeleted
				if ref.Name != "db" || ref.UID != "u1" {
					t.Fatalf("Follow = %+v", ref)
				}
			}
			if got != tc.want || known != tc.known {
				t.Fatalf("Follow = %q, known %v; want %q, %v", got, known, tc.want, tc.known)
			}
		})
	}
}
