package facts

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPodFrom(t *testing.T) {
	yes := true
	now := metav1.Now()
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u", ResourceVersion: "9", CreationTimestamp: now, DeletionTimestamp: &now,
			Labels: map[string]string{"app": "db"},
			Annotations: map[string]string{"stickyip.io/identity": "cache", "kubernetes.io/config.mirror": "x",
				"stickyip.io/retention": "fixed", "big": "value"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "nu"},
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "s", Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	got := PodFrom(full)
	want := &Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u", CreationTimestamp: now, DeletionTimestamp: &now,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "s"}}},
		NodeName: "n1", IdentityKey: "cache", Keyed: true, Mirror: true, NodeOwned: true, Fixed: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("facts\n%+v\nwant\n%+v", got, want)
	}
	if got.Identity() != "identity:cache" || got.Controller().Name != "db" {
		t.Errorf("identity %q, controller %+v", got.Identity(), got.Controller())
	}
	plain := PodFrom(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
	if plain.Identity() != "web" || plain.Controller() != nil || plain.Keyed || plain.Mirror || plain.NodeOwned || plain.Fixed {
		t.Errorf("plain pod: %+v", plain)
	}
}

func TestStatefulSetFrom(t *testing.T) {
	three := int32(3)
	s := StatefulSetFrom(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Finalizers: []string{"orphan"}}})
	if s.Replicas != 1 || s.Start != 0 || s.WhenScaled != "Retain" || s.WhenDeleted != "Retain" || !s.Orphaning() {
		t.Errorf("defaults: %+v", s)
	}
	s = StatefulSetFrom(&appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &three, Ordinals: &appsv1.StatefulSetOrdinals{Start: 5},
		PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenScaled: "Delete", WhenDeleted: "Delete"}}})
	if s.Replicas != 3 || s.Start != 5 || s.WhenScaled != "Delete" || s.WhenDeleted != "Delete" || s.Orphaning() {
		t.Errorf("set: %+v", s)
	}
}

// The transform is idempotent and leaves what it does not know alone (an
// informer may hand it an object twice, and hands it tombstones).
func TestTransform(t *testing.T) {
	for _, obj := range []any{&corev1.Pod{}, &appsv1.StatefulSet{}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", Labels: map[string]string{"a": "b"}}}} {
		once, err := Transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		twice, err := Transform(once)
		if err != nil || twice != once {
			t.Errorf("%T: transformed again: %v %v", obj, twice, err)
		}
		if _, err := cache.MetaNamespaceKeyFunc(once); err != nil {
			t.Errorf("%T: an informer cannot key it: %v", once, err)
		}
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "a/b"}
	if got, _ := Transform(tomb); got != tomb {
		t.Errorf("tombstone changed: %v", got)
	}
	if n, _ := Transform(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "u", Labels: map[string]string{"a": "b"}}}); n.(*Node).Labels != nil {
		t.Errorf("node keeps its labels: %+v", n)
	}
}
