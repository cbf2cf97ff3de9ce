// Package retention makes a StatefulSet pod's reservation follow its
// StatefulSet, as the pod's volumes do (issue 51): the StatefulSet's
// spec.persistentVolumeClaimRetentionPolicy keeps the address through any
// scale-down (whenScaled Retain, the Kubernetes default) or releases it at
// the scale-down that removes the pod (Delete); releases every address of
// the StatefulSet when it is deleted (whenDeleted Delete) or keeps each for
// its duration from then (Retain).
//
// Who knows what. The plugin sees a pod's annotations and CNI_ARGS, never
// its owner: it records the reservation's duration, and whether the pod
// asked for a fixed one (stickyip.io/retention). checkpointd sees the
// node's pods with their ownerReferences, and (one watch for the node,
// kube.Client.StatefulSet) the cluster's StatefulSets. So checkpointd
// records, on the allocation of each running StatefulSet pod, which
// StatefulSet its reservation will follow, with the policy as it last saw
// it (Follower: ipam.FollowPod); the pod's DEL, wherever it runs from (the
// runtime, a reboot, checkpointd's own leak reconciliation), then leaves a
// reservation no clock ends (reservation.Record.Held); and checkpointd
// ends it when the StatefulSet says so (Decide: ipam.Release, ipam.Expire),
// or records the policy when it changes (ipam.Refresh). The store holds
// what checkpointd last knew, so a reboot, a restart or an API server away
// change nothing: nothing is released but on what the watch showed.
//
// Decide and Follow are pure, and their tests walk every case; Follower
// is the loop that reads and applies them.
package retention

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// Follow returns the StatefulSet the reservation of pod will follow: its
// controller (ownerReferences[].controller) when that is an apps/v1
// StatefulSet, pod carries the name it gives one of its ordinals, and set
// is that StatefulSet as the watch last saw it (same UID). nil, true: the
// pod has no StatefulSet (its reservation is fixed). false: not known yet
// (the watch has not seen the pod's StatefulSet): leave the record as it is.
func Follow(pod *corev1.Pod, set *apiclient.StatefulSet) (*reservation.StatefulSetRef, bool) {
	var owner *struct{ name, uid string }
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.APIVersion == "apps/v1" && r.Kind == "StatefulSet" {
			owner = &struct{ name, uid string }{r.Name, string(r.UID)}
		}
	}
	if owner == nil {
		return nil, true
	}
	if _, ok := contract.StatefulSetOrdinal(pod.Name, owner.name); !ok {
		return nil, true // not a name the StatefulSet gives: a bare pod naming it as its controller
	}
	if set == nil || string(set.UID) != owner.uid || set.Name != owner.name {
		return nil, false
	}
	whenScaled, whenDeleted := policyOf(set)
	return &reservation.StatefulSetRef{Name: set.Name, UID: string(set.UID), WhenScaled: whenScaled, WhenDeleted: whenDeleted}, true
}

// policyOf returns a StatefulSet's whenScaled and whenDeleted; absent is
// Retain, as Kubernetes reads it.
func policyOf(set *apiclient.StatefulSet) (whenScaled, whenDeleted string) {
	whenScaled, whenDeleted = contract.PolicyRetain, contract.PolicyRetain
	if p := set.Spec.PersistentVolumeClaimRetentionPolicy; p != nil {
		if p.WhenScaled == contract.PolicyDelete {
			whenScaled = contract.PolicyDelete
		}
		if p.WhenDeleted == contract.PolicyDelete {
			whenDeleted = contract.PolicyDelete
		}
	}
	return whenScaled, whenDeleted
}

// Decide returns the changes a held reservation r needs (none: it stays
// as it is), given the StatefulSet of its name as the watch last saw it
// (nil: there is none), the node that claimed r's identity after this one
// in the placement index ("": none, or no index), at now:
//
//	StatefulSet                        whenScaled / whenDeleted  change
//	r's (same UID, or r's not known)   —                          Refresh when the policy or UID differs from r's
//	  the pod's ordinal in range       —                          none: the pod comes back
//	  out of range (scaled down)       whenScaled Retain          none
//	  out of range                     whenScaled Delete          Release
//	  being deleted                    its whenDeleted Delete     Release
//	  being deleted                    its whenDeleted Retain     Expire (its duration from the deletion)
//	none, or another UID (re-created)  r's whenDeleted Delete     Release
//	none, or another UID               r's Retain, or not known   Expire (from now)
//	claimed later by another node      (unless released above)    Expire (from now): the pod runs there
//
// The range is [spec.ordinals.start, start + spec.replicas). A record whose
// identity is no name of its StatefulSet is left as it is (but for a later
// claim). A pod the placement hint now sends to another node would never
// claim this node's address: kept for good, it would hold an address, and
// a place in reservation.maxPerNamespace, nobody claims.
func Decide(r *reservation.Record, set *apiclient.StatefulSet, claimedBy string, now time.Time) []ipam.RetentionChange {
	if !r.Held() {
		return nil
	}
	out := decide(r, set, now)
	if claimedBy == "" || slices.ContainsFunc(out, func(c ipam.RetentionChange) bool { return c.Action != ipam.Refresh }) {
		return out
	}
	return append(out, ipam.RetentionChange{Action: ipam.Expire, Namespace: r.Identity.Namespace, Name: r.Identity.Name, At: now,
		MovedTo: claimedBy, Why: fmt.Sprintf("node %s claimed %s later (the pod runs there)", claimedBy, r.Identity.Name)})
}

// decide is Decide by the StatefulSet alone.
func decide(r *reservation.Record, set *apiclient.StatefulSet, now time.Time) []ipam.RetentionChange {
	w := r.StatefulSet
	change := func(a ipam.RetentionAction, why string) ipam.RetentionChange {
		return ipam.RetentionChange{Action: a, Namespace: r.Identity.Namespace, Name: r.Identity.Name, At: now, Why: why}
	}
	if set == nil || (w.UID != "" && string(set.UID) != w.UID) {
		why := fmt.Sprintf("StatefulSet %s was deleted (whenDeleted: %s)", w.Name, policy(w.WhenDeleted))
		if set != nil {
			why = fmt.Sprintf("StatefulSet %s (uid %s) was deleted and another of its name created (whenDeleted: %s)", w.Name, w.UID, policy(w.WhenDeleted))
		}
		if w.WhenDeleted == contract.PolicyDelete {
			return []ipam.RetentionChange{change(ipam.Release, why)}
		}
		return []ipam.RetentionChange{change(ipam.Expire, why)}
	}
	whenScaled, whenDeleted := policyOf(set)
	var out []ipam.RetentionChange
	now2 := &reservation.StatefulSetRef{Name: set.Name, UID: string(set.UID), WhenScaled: whenScaled, WhenDeleted: whenDeleted}
	if *now2 != *w {
		c := change(ipam.Refresh, "the StatefulSet's retention policy or UID changed")
		c.StatefulSet = now2
		out = append(out, c)
	}
	if set.DeletionTimestamp != nil {
		why := fmt.Sprintf("StatefulSet %s is being deleted (whenDeleted: %s)", set.Name, whenDeleted)
		if whenDeleted == contract.PolicyDelete {
			return append(out, change(ipam.Release, why))
		}
		c := change(ipam.Expire, why)
		c.At = set.DeletionTimestamp.Time
		return append(out, c)
	}
	ordinal, ok := contract.StatefulSetOrdinal(r.Identity.Name, set.Name)
	if !ok {
		return out
	}
	start, replicas := 0, 1
	if set.Spec.Ordinals != nil {
		start = int(set.Spec.Ordinals.Start)
	}
	if set.Spec.Replicas != nil {
		replicas = int(*set.Spec.Replicas)
	}
	if (ordinal < start || ordinal >= start+replicas) && whenScaled == contract.PolicyDelete {
		why := fmt.Sprintf("StatefulSet %s scaled to ordinals %d-%d, without %s (whenScaled: Delete)", set.Name, start, start+replicas-1, r.Identity.Name)
		if replicas <= 0 {
			why = fmt.Sprintf("StatefulSet %s scaled to zero (whenScaled: Delete)", set.Name)
		}
		return append(out, change(ipam.Release, why))
	}
	return out
}

// policy names a recorded policy; "" (not known) reads as Retain.
func policy(p string) string {
	if p == "" {
		return contract.PolicyRetain + ", not known"
	}
	return p
}
