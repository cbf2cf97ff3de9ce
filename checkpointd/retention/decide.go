// Package retention makes a StatefulSet pod's reservation end as its
// volume claim does. stickyip-controller, which watches the StatefulSets
// where cluster controllers run, decides for every node: it keeps in each
// NodeRecord's status, for every StatefulSet pod's claim, what owns the
// pod's volume claim (as the StatefulSet controller sets it while the pod
// exists) and its verdict — Hold or Release — with why. This node applies
// it to its IPAM store: a running pod's allocation follows its StatefulSet
// (ipam.FollowPod: its DEL, wherever it comes from, then leaves a held
// reservation no clock ends), a held reservation is released when the
// verdict says so (a running pod's before its DEL, when its StatefulSet
// went with its volume claims), and lasts its own duration from now when
// another node runs the pod since, or when following stops (the flag off,
// or the API no longer serves the node its record). The node reads no
// StatefulSet.
//
// Decide is pure and its test walks every case; Follower is the loop that
// reads and applies it.
package retention

import (
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// Why a held reservation stops following when following stops.
const (
	WhyOff     = "following StatefulSets is off (--follow-statefulsets=false): it lasts its own duration from now"
	WhyRefused = "the API server no longer serves this node its NodeRecord (deploy/placement removed, or the nodes' RBAC): it lasts its own duration from now"
	WhyLater   = "another node ran the pod since: it lasts its own duration from now"
)

// Decide returns, by network, the changes the records of entries need,
// given the node's record as last seen (nil: none), whether following is
// on, why not when it is off, at now:
//
//	following  record                              change
//	off        —                                   every held reservation: Expire (now, why)
//	on         none, or judged under another UID   none
//	on         a StatefulSet claim for a running   FollowPod, when the record does not follow
//	           pod's allocation (same pod UID)       that StatefulSet (name, UID, why) yet;
//	                                               Release (UID) when its verdict is Release
//	                                               (its StatefulSet went with its volume
//	                                               claims): the pod's DEL then frees the address
//	on         a claim accepted, indexed elsewhere Expire (now): the pod runs on another node
//	on         a StatefulSet claim, verdict        Release
//	           Release, for the held reservation's
//	           pod
//	on         verdict Hold                        Refresh, when its account (UID, why) changed
//
// A held reservation the controller has said nothing of is left as it is:
// nothing is released on a guess.
func Decide(entries []reservation.Entry, rec *placementv1.NodeRecord, following bool, off string, now time.Time) map[string][]ipam.RetentionChange {
	out := map[string][]ipam.RetentionChange{}
	add := func(network string, c ipam.RetentionChange) { out[network] = append(out[network], c) }
	claims := map[[2]string]*placementv1.Claim{}
	if rec != nil && rec.Status.NodeUID != "" && rec.Status.NodeUID == rec.Spec.NodeUID {
		for i := range rec.Status.Claims {
			c := &rec.Status.Claims[i]
			claims[[2]string{c.Namespace, c.Identity}] = c
		}
	}
	seen := map[string]bool{} // network/namespace/name/action decided already: one identity, several interfaces
	once := func(e reservation.Entry, action string) bool {
		k := e.Network + "/" + e.Identity.Namespace + "/" + e.Identity.Name + "/" + action
		if seen[k] {
			return false
		}
		seen[k] = true
		return true
	}
	for _, e := range entries {
		change := func(a ipam.RetentionAction, why string) ipam.RetentionChange {
			return ipam.RetentionChange{Action: a, Namespace: e.Identity.Namespace, Name: e.Identity.Name, At: now, Why: why}
		}
		c := claims[[2]string{e.Identity.Namespace, e.Identity.Name}]
		switch {
		case e.Held() && !following:
			if once(e, "off") {
				add(e.Network, change(ipam.Expire, off))
			}
		case !following || c == nil:
		case e.Held():
			if ch, ok := decideHeld(e.Record, c, change); ok && once(e, "held") {
				add(e.Network, ch)
			}
		case followable(e.Record) && c.StatefulSet != nil && string(c.PodUID) == e.UID && c.StatefulSet.Verdict == placementv1.Release:
			if once(e, "release/"+e.UID) {
				ch := change(ipam.Release, c.StatefulSet.Why)
				ch.UID = e.UID
				add(e.Network, ch)
			}
		case followable(e.Record) && c.StatefulSet != nil && string(c.PodUID) == e.UID:
			want := ref(c.StatefulSet)
			if !sameRef(e.StatefulSet, want) && once(e, "follow/"+e.UID) {
				ch := change(ipam.FollowPod, "")
				ch.UID, ch.StatefulSet = e.UID, want
				add(e.Network, ch)
			}
		}
	}
	return out
}

// decideHeld is Decide for one held reservation r and its claim c.
func decideHeld(r *reservation.Record, c *placementv1.Claim, change func(ipam.RetentionAction, string) ipam.RetentionChange) (ipam.RetentionChange, bool) {
	if c.Accepted() && !c.Indexed {
		ch := change(ipam.Expire, WhyLater)
		ch.MovedTo = "another node"
		return ch, true
	}
	s := c.StatefulSet
	if s == nil || string(c.PodUID) != r.UID || (r.StatefulSet.UID != "" && string(s.UID) != r.StatefulSet.UID) {
		return ipam.RetentionChange{}, false // said of another pod, or of another StatefulSet
	}
	if s.Verdict == placementv1.Release {
		return change(ipam.Release, s.Why), true
	}
	if want := ref(s); !sameRef(r.StatefulSet, want) {
		ch := change(ipam.Refresh, s.Why)
		ch.StatefulSet = want
		return ch, true
	}
	return ipam.RetentionChange{}, false
}

// followable reports whether r is a running pod's allocation whose
// reservation may follow a StatefulSet: a reservation of the workload
// kind, for a pod-name identity.
func followable(r *reservation.Record) bool {
	_, keyed := contract.IdentityKey(r.Identity.Name)
	return r.State == reservation.Allocated && r.Duration > 0 && r.Retention != contract.RetentionFixed && r.UID != "" && !keyed
}

// ref is the record's account of the controller's.
func ref(s *placementv1.Retention) *reservation.StatefulSetRef {
	return &reservation.StatefulSetRef{Name: s.Name, UID: string(s.UID), Why: s.Why}
}

// sameRef reports whether a record follows what want says.
func sameRef(have, want *reservation.StatefulSetRef) bool {
	return have != nil && have.Name == want.Name && have.UID == want.UID && have.Why == want.Why && have.EndedAt.IsZero()
}
