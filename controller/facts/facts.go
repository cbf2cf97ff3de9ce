// Package facts is what stickyip-controller keeps of the cluster's pods,
// StatefulSets and Nodes: the few fields its decisions read, made from the
// API's objects by the informers' transforms, so that its caches cost a few
// hundred bytes per pod instead of the whole object (a pod's spec and
// status alone are most of a kilobyte before any string).
//
// Each type embeds a trimmed metav1.ObjectMeta: an informer keys and
// indexes its objects through it.
package facts

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract"
)

// Pod is what the controller knows of a pod. ObjectMeta keeps the name,
// namespace, UID, creation and deletion times, and the controller
// reference alone of the owner references.
type Pod struct {
	metav1.ObjectMeta
	// NodeName is the node the pod is bound to ("": not yet bound).
	NodeName string
	// IdentityKey is the pod's stickyip.io/identity, when Keyed.
	IdentityKey string
	Keyed       bool
	// Mirror: the pod carries kubernetes.io/config.mirror (a node made it).
	Mirror bool
	// NodeOwned: an owner reference of kind Node (a node made it).
	NodeOwned bool
	// Fixed: stickyip.io/retention is fixed (the reservation follows no
	// StatefulSet).
	Fixed bool
}

// Identity is the pod's identity: "identity:" and its stickyip.io/identity
// when it carries one, else its name.
func (p *Pod) Identity() string {
	if p.Keyed {
		return contract.KeyedIdentity(p.IdentityKey)
	}
	return p.Name
}

// Controller returns the pod's controller reference (nil: none).
func (p *Pod) Controller() *metav1.OwnerReference {
	if len(p.OwnerReferences) == 0 {
		return nil
	}
	return &p.OwnerReferences[0]
}

// PodFrom returns the facts of pod.
func PodFrom(pod *corev1.Pod) *Pod {
	out := &Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
		CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp}, NodeName: pod.Spec.NodeName}
	for _, r := range pod.OwnerReferences {
		if r.Kind == "Node" {
			out.NodeOwned = true
		}
		if r.Controller != nil && *r.Controller && len(out.OwnerReferences) == 0 {
			out.OwnerReferences = []metav1.OwnerReference{{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID}}
		}
	}
	out.IdentityKey, out.Keyed = pod.Annotations[contract.AnnotationIdentity]
	_, out.Mirror = pod.Annotations[contract.AnnotationConfigMirror]
	out.Fixed = pod.Annotations[contract.AnnotationRetention] == contract.RetentionFixed
	return out
}

// StatefulSet is what the controller knows of a StatefulSet. ObjectMeta
// keeps the name, namespace, UID, creation and deletion times and the
// finalizers (the orphan finalizer tells an orphaning deletion).
type StatefulSet struct {
	metav1.ObjectMeta
	// Replicas is spec.replicas (1 when unset, as the API defaults it).
	Replicas int32
	// Start is spec.ordinals.start (0 when unset).
	Start int32
	// WhenScaled and WhenDeleted are its
	// persistentVolumeClaimRetentionPolicy: contract.PolicyRetain (also
	// when unset) or contract.PolicyDelete.
	WhenScaled, WhenDeleted string
}

// StatefulSetFrom returns the facts of set.
func StatefulSetFrom(set *appsv1.StatefulSet) *StatefulSet {
	out := &StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: set.Name, Namespace: set.Namespace, UID: set.UID,
		CreationTimestamp: set.CreationTimestamp, DeletionTimestamp: set.DeletionTimestamp, Finalizers: set.Finalizers},
		Replicas: 1, WhenScaled: contract.PolicyRetain, WhenDeleted: contract.PolicyRetain}
	if set.Spec.Replicas != nil {
		out.Replicas = *set.Spec.Replicas
	}
	if set.Spec.Ordinals != nil {
		out.Start = set.Spec.Ordinals.Start
	}
	if p := set.Spec.PersistentVolumeClaimRetentionPolicy; p != nil {
		if p.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			out.WhenScaled = contract.PolicyDelete
		}
		if p.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			out.WhenDeleted = contract.PolicyDelete
		}
	}
	return out
}

// Orphaning reports whether the StatefulSet is being deleted with orphan
// propagation: the garbage collector then strips the owner references of
// its dependents (its volume claims among them), and they stay.
func (s *StatefulSet) Orphaning() bool {
	for _, f := range s.Finalizers {
		if f == metav1.FinalizerOrphanDependents {
			return true
		}
	}
	return false
}

// Node is what the controller knows of a Node: its name and UID.
type Node struct {
	metav1.ObjectMeta
}

// NodeFrom returns the facts of node.
func NodeFrom(node *corev1.Node) *Node {
	return &Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, DeletionTimestamp: node.DeletionTimestamp}}
}
