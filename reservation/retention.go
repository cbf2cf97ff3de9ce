package reservation

import (
	"time"

	"github.com/stickyip/stickyip/contract"
)

// StatefulSetRef is the StatefulSet a pod's reservation follows, with the
// retention policy of its volumes (spec.persistentVolumeClaimRetentionPolicy)
// as checkpointd last saw them. The pod's ordinal is the suffix of its
// identity's name (Ordinal).
type StatefulSetRef struct {
	// Name is the StatefulSet's name, in the identity's namespace.
	Name string `json:"name"`
	// UID is the StatefulSet's UID; "" when not known (a reservation put
	// back from the placement index: checkpointd takes the StatefulSet of
	// that name for it).
	UID string `json:"uid,omitempty"`
	// WhenScaled and WhenDeleted are contract.PolicyRetain or
	// contract.PolicyDelete; "" when not known (read as Retain: nothing is
	// released on a guess).
	WhenScaled  string `json:"whenScaled,omitempty"`
	WhenDeleted string `json:"whenDeleted,omitempty"`
	// EndedAt is when the StatefulSet stopped keeping the reservation but
	// did not release it: checkpointd saw it deleted (whenDeleted Retain),
	// or, with MovedTo, saw another node claim the pod's identity later in
	// the placement index (the pod runs there now). The reservation then
	// ends Duration after EndedAt, as a fixed one.
	EndedAt time.Time `json:"endedAt,omitzero"`
	// MovedTo is the node that claimed the identity later ("": the hold
	// ended with the StatefulSet's deletion).
	MovedTo string `json:"movedTo,omitempty"`
	// Why is stickyip-controller's account of what keeps the reservation
	// and what would end it, as `stickyip list` shows it.
	Why string `json:"why,omitempty"`
}

// Follows reports whether the record's reservation follows a StatefulSet
// (at DEL, and while it is reserved): it has one recorded, still there as
// far as checkpointd saw, and the pod did not ask for a fixed duration.
func (r *Record) Follows() bool {
	return r.StatefulSet != nil && r.StatefulSet.EndedAt.IsZero() && r.Retention != contract.RetentionFixed
}

// Held reports whether the record is a reservation its StatefulSet keeps:
// it does not expire by time (ExpiresAt is only the end its duration would
// have given it), and only checkpointd ends it, as the StatefulSet says, or
// an operator's release, or a new pod when the pool is full (Overdue).
func (r *Record) Held() bool { return r.State == Reserved && r.Follows() }

// Overdue reports whether a Held reservation has outlived its own duration
// at now: kept by its StatefulSet alone, it gives way first to a new pod
// when its range set is full, whatever reservation.poolFull says.
func (r *Record) Overdue(now time.Time) bool { return r.Held() && !now.Before(r.ExpiresAt) }

// Ordinal returns the ordinal of the StatefulSet pod the record's identity
// names (db-2 of StatefulSet db: 2), and false when the identity is not a
// pod of r.StatefulSet.
func (r *Record) Ordinal() (int, bool) {
	if r.StatefulSet == nil {
		return 0, false
	}
	return contract.StatefulSetOrdinal(r.Identity.Name, r.StatefulSet.Name)
}
