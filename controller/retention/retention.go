// Package retention decides, for the claim of a StatefulSet pod, whether
// the node keeps the pod's reservation: exactly while Kubernetes keeps the
// pod's volume claims (PVCs). It models what owns those claims as the
// StatefulSet controller and the garbage collector of Kubernetes 1.36.3
// set it (k8s.io/kubernetes pkg/controller/statefulset):
//
//	upstream                                            what it does to a pod's PVCs               here
//	stateful_set_utils.go                               no policy reads as Retain/Retain             facts.StatefulSetFrom
//	  getPersistentVolumeClaimRetentionPolicy
//	stateful_set_utils.go podInOrdinalRange,            the pod is in range when                     InRange
//	  getStartOrdinal, getEndOrdinal                    start <= ordinal <= start+replicas-1
//	stateful_set_utils.go                               Retain/Retain: no owner                      Owner
//	  updateClaimOwnerRefForSetAndPod                   Retain/Delete: the StatefulSet
//	  (whenScaled/whenDeleted)                          Delete/Retain: the pod when out of range,
//	                                                      else none
//	                                                    Delete/Delete: the pod when out of range,
//	                                                      else the StatefulSet
//	stateful_set_control.go updateStatefulSet:          owners are set only for pods that exist:     recomputed from the current
//	  processReplica (ClaimsMatchRetentionPolicy,       the replicas in range, and each condemned    StatefulSet while the pod
//	  UpdateStatefulPod) for replicas in range;         pod before processCondemned deletes it;     exists; frozen once it is gone
//	  fixPodClaim for each condemned pod, then          a pod already gone is never looked at        (a policy edited after a
//	  processCondemned                                  again                                        scale-down changes nothing)
//	stateful_set_control.go updateStatefulSet:          nothing is touched while the StatefulSet     frozen while it is being
//	  "if set.DeletionTimestamp != nil" returns         is being deleted                             deleted
//	stateful_set_utils.go isClaimOwnerUpToDate,         references to another StatefulSet UID are    a pod adopted by a new
//	  hasStaleOwnerRef, hasUnexpectedController         left alone; a pod adopted by a new           StatefulSet of the name
//	                                                    StatefulSet gets its owners from it          follows the new one
//	garbage collector, background or foreground         the claims the StatefulSet (or the pod)      Release
//	  deletion of the owner                             owns are deleted
//	garbage collector, orphan deletion                  the owner references are stripped: the       owner none: Hold
//	  (finalizer "orphan")                              claims stay
//
// Verdict: while the pod exists, Hold (a sandbox holds the address, or
// will again); once it is gone, by owner: the pod → Release; the
// StatefulSet → Hold while that StatefulSet (UID) exists, Release once it
// is deleted with background or foreground propagation, Hold (owner none)
// when with orphan propagation; none → Hold. A Release is final. When the
// controller did not see how a StatefulSet went (it was down), an
// orphaning deletion is inferred from a pod of its names that is still
// there without a controller, or adopted by a later StatefulSet of the
// name (created before it); else background.
//
// A claim whose pod asks for a fixed retention (stickyip.io/retention:
// fixed), is no StatefulSet's, or whose StatefulSet the controller never
// saw, follows nothing (nil): the node lets the reservation's own
// duration run.
package retention

import (
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

// InRange reports whether ordinal is one set keeps (podInOrdinalRange).
func InRange(set *facts.StatefulSet, ordinal int) bool {
	start := int(set.Start)
	return ordinal >= start && ordinal <= start+int(set.Replicas)-1
}

// Owner is what owns the volume claims of set's pod of ordinal, as
// updateClaimOwnerRefForSetAndPod sets it: placementv1.OwnerStatefulSet,
// placementv1.OwnerPod, or "" (none).
func Owner(set *facts.StatefulSet, ordinal int) string {
	scaledDown := !InRange(set, ordinal)
	switch {
	case set.WhenScaled == contract.PolicyRetain && set.WhenDeleted == contract.PolicyDelete:
		return placementv1.OwnerStatefulSet
	case set.WhenScaled == contract.PolicyDelete && scaledDown:
		return placementv1.OwnerPod
	case set.WhenScaled == contract.PolicyDelete && set.WhenDeleted == contract.PolicyDelete:
		return placementv1.OwnerStatefulSet
	}
	return ""
}

// Deletion is how a StatefulSet was seen to go.
type Deletion int

// Deletions.
const (
	// Unseen: the controller did not see it go (or it has not gone).
	Unseen Deletion = iota
	// Orphaned: deleted with orphan propagation.
	Orphaned
	// Cascaded: deleted with background or foreground propagation.
	Cascaded
)

// Input is what the controller knows of one accepted claim's pod.
type Input struct {
	// PodName is the claim's pod.
	PodName string
	// Pod is the pod: live, or (Gone) as last seen; nil when gone and not
	// seen (then Gone).
	Pod  *facts.Pod
	Gone bool
	// Prev is the claim's retention as decided before for this pod (nil:
	// none).
	Prev *placementv1.Retention
	// Set is the StatefulSet of the pod's namespace under the name the
	// pod's controller reference (or Prev) gives, as cached (nil: none).
	Set *facts.StatefulSet
	// Deletion is how the StatefulSet of Prev's UID went, when seen.
	Deletion Deletion
	// Orphans: Orphans(…) of that StatefulSet, asked only when it is gone
	// and its deletion unseen.
	Orphans func() bool
}

// Decide returns the retention of the claim (nil: it follows nothing).
func Decide(in Input) *placementv1.Retention {
	if p := in.Prev; in.Gone && p != nil && p.Verdict == placementv1.Release {
		r := *p
		return &r
	}
	r, ok := follow(in)
	if !ok {
		return nil
	}
	verdict(in, &r)
	return &r
}
