package ipam

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// RetentionAction is one change checkpointd makes to how a pod identity's
// reservations end, from what it sees of the pod and its StatefulSet.
type RetentionAction int

const (
	// FollowPod records StatefulSet (nil: none) on the allocations of pod
	// UID: at their DEL they become reservations that follow it (a pod
	// that asked for a fixed reservation, or none, is left as it is).
	FollowPod RetentionAction = iota + 1
	// Refresh records StatefulSet on the identity's held reservations: the
	// StatefulSet's retention policy changed, or its UID was not known.
	Refresh
	// Release ends the identity's held reservations now: their addresses
	// are free, as an expired reservation's are. With UID, it also ends
	// the reservation the running pod UID's allocations would leave: their
	// DEL frees them (its StatefulSet went, and its volume claims with it).
	Release
	// Expire ends their hold: the StatefulSet was seen deleted at At with
	// whenDeleted Retain, or (MovedTo) another node claimed the identity
	// later; each lasts its own duration from At.
	Expire
)

func (a RetentionAction) String() string {
	switch a {
	case FollowPod:
		return "follow"
	case Refresh:
		return "refresh"
	case Release:
		return "release"
	case Expire:
		return "expire"
	}
	return fmt.Sprintf("RetentionAction(%d)", int(a))
}

// RetentionChange is one RetentionAction on the records of one pod
// identity (a pod name: StatefulSet pods have no other) on every interface.
type RetentionChange struct {
	Action          RetentionAction
	Namespace, Name string
	// UID is the pod whose allocations FollowPod changes.
	UID string
	// StatefulSet is what FollowPod and Refresh record.
	StatefulSet *reservation.StatefulSetRef
	// At is when Expire saw the StatefulSet deleted, or the later claim.
	At time.Time
	// MovedTo is, for Expire, the node that claimed the identity later ("":
	// the StatefulSet was deleted).
	MovedTo string
	// Why says, for the log, what checkpointd saw (Release, Expire).
	Why string
}

// Retain applies checkpointd's retention changes to a network's records
// and returns how many records changed (reservation.ErrNoChange with none,
// so that the store syncs nothing). checkpointd decides from what it sees
// of the API server; every record rule stays here: only a held reservation
// is released or given an end, only an allocation with a reservation of
// the workload kind follows a StatefulSet. Like ReleasePod it needs no
// network config: a retention can always end.
func Retain(tx reservation.Txn, changes []RetentionChange, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := 0
	for _, c := range changes {
		recs, err := tx.ByNamespace(c.Namespace)
		if err != nil {
			return n, err
		}
		for _, r := range recs {
			if r.Identity.Name != c.Name {
				continue
			}
			changed, err := retain(tx, r, c, log)
			if err != nil {
				return n, err
			}
			if changed {
				n++
			}
		}
	}
	if n == 0 {
		return 0, reservation.ErrNoChange
	}
	return n, nil
}

// retain applies c to one record of its identity.
func retain(tx reservation.Txn, r *reservation.Record, c RetentionChange, log *slog.Logger) (bool, error) {
	switch c.Action {
	case FollowPod:
		if r.State != reservation.Allocated || r.UID != c.UID || r.Duration <= 0 || r.Retention == contract.RetentionFixed ||
			sameRef(r.StatefulSet, c.StatefulSet) {
			return false, nil
		}
		r.StatefulSet = copyRef(c.StatefulSet)
		return true, tx.Put(r)
	case Refresh:
		if !r.Held() || c.StatefulSet == nil || sameRef(r.StatefulSet, c.StatefulSet) {
			return false, nil
		}
		r.StatefulSet = copyRef(c.StatefulSet)
		return true, tx.Put(r)
	case Release:
		switch {
		case r.Held():
			log.Info("reservation released: its StatefulSet no longer retains it", "ip", r.IP, "pod", r.Identity.Pod(),
				"ifname", r.Identity.IfName, "statefulSet", r.StatefulSet.Name, "why", c.Why)
			return true, tx.Delete(r.IP)
		case c.UID != "" && r.State == reservation.Allocated && r.UID == c.UID && r.Duration > 0 && r.Retention != contract.RetentionFixed:
			// Decided before the DEL, as an operator's release of a running
			// pod is: a pod of the name created right after the DEL (its
			// StatefulSet deleted and created again) finds nothing to take.
			r.Duration, r.DurationFrom = 0, ""
			if r.StatefulSet != nil {
				r.StatefulSet.Why = c.Why
			}
			log.Info("reservation released while the pod runs: its StatefulSet no longer retains it, its DEL frees the address", "ip", r.IP,
				"pod", r.Identity.Pod(), "ifname", r.Identity.IfName, "uid", r.UID, "why", c.Why)
			return true, tx.Put(r)
		}
		return false, nil
	case Expire:
		if !r.Held() {
			return false, nil
		}
		r.StatefulSet.EndedAt, r.StatefulSet.MovedTo = c.At, c.MovedTo
		if c.Why != "" {
			r.StatefulSet.Why = c.Why
		}
		r.ExpiresAt = c.At.Add(r.Duration)
		log.Info("reservation kept for its duration only: its StatefulSet no longer keeps it here", "ip", r.IP, "pod", r.Identity.Pod(),
			"ifname", r.Identity.IfName, "statefulSet", r.StatefulSet.Name, "until", r.ExpiresAt.UTC().Format(time.RFC3339), "why", c.Why)
		return true, tx.Put(r)
	}
	return false, fmt.Errorf("unknown retention action %v", c.Action)
}

func sameRef(a, b *reservation.StatefulSetRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Name == b.Name && a.UID == b.UID && a.WhenScaled == b.WhenScaled && a.WhenDeleted == b.WhenDeleted && a.EndedAt.Equal(b.EndedAt) &&
		a.MovedTo == b.MovedTo && a.Why == b.Why
}

func copyRef(w *reservation.StatefulSetRef) *reservation.StatefulSetRef {
	if w == nil {
		return nil
	}
	c := *w
	return &c
}
