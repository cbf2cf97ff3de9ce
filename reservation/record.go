// Package reservation defines what stickyip remembers about IP addresses: live
// allocations held by a sandbox and reservations kept for a pod identity after
// its sandbox was deleted, and the small transactional interface the allocation
// engine uses to read and change them. The bbolt implementation lives in
// reservation/boltstore; reservation/fake holds an in-memory one for tests.
package reservation

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// State says whether a record is held by a live sandbox or kept for an identity.
type State string

const (
	// Allocated: a sandbox (ContainerID, IfName) holds the IP.
	Allocated State = "allocated"
	// Reserved: no sandbox holds the IP; it is kept for Identity until ExpiresAt.
	Reserved State = "reserved"
	// Cooling: freed without a reservation less than the reuse delay ago; it
	// is handed out again only after ExpiresAt, or when nothing else is free.
	// LastIdentity remembers who held it: only that identity may ask for it
	// before ExpiresAt.
	Cooling State = "cooling"
)

// Entry is one record with the network it belongs to: what the operator
// tool lists and checkpointd reads.
type Entry struct {
	Network string
	*Record
}

// Identity is who a reservation belongs to inside one network: the pod's
// namespace, its identity name (the pod's name, or
// contract.KeyedIdentity of its stickyip.io/identity) and the interface
// name. The zero Identity means "no pod identity known" (a plain CNI call
// without K8S_POD_* arguments).
type Identity struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	IfName    string `json:"ifname,omitempty"`
	// Legacy marks an identity recorded by a stickyip before schema 3, which
	// took a pod name and an equal stickyip.io/identity value for one
	// identity: it still answers to both (Same) until an ADD takes its
	// record over or it expires, so an upgrade loses no reservation.
	Legacy bool `json:"legacy,omitempty"`
}

// IsZero reports whether no pod identity is known.
func (i Identity) IsZero() bool { return i.Namespace == "" || i.Name == "" }

// Same reports whether i and o are one identity: the same namespace,
// interface and name, where a Legacy name also stands for the keyed
// identity of the same spelling (schema 2 did not tell them apart).
func (i Identity) Same(o Identity) bool {
	return i.IfName == o.IfName && (i.Answers(o.Namespace, o.Name) || o.Answers(i.Namespace, i.Name))
}

// Answers reports whether i belongs to the identity namespace/name on some
// interface: the same name, or, for a Legacy i, the keyed identity of its
// name.
func (i Identity) Answers(namespace, name string) bool {
	if i.Namespace != namespace {
		return false
	}
	if i.Name == name {
		return true
	}
	key, keyed := contract.IdentityKey(name)
	return i.Legacy && keyed && key == i.Name
}

// Pod returns "namespace/name".
func (i Identity) Pod() string { return i.Namespace + "/" + i.Name }

// String returns "namespace/name/ifname".
func (i Identity) String() string { return i.Namespace + "/" + i.Name + "/" + i.IfName }

// Record is everything stored about one IP address of one network.
type Record struct {
	IP       netip.Addr `json:"ip"`
	RangeSet int        `json:"rangeSet"` // index of the range set in the config at allocation time
	State    State      `json:"state"`

	ContainerID string `json:"containerID,omitempty"` // empty when Reserved
	IfName      string `json:"ifname,omitempty"`
	Netns       string `json:"netns,omitempty"`  // CNI_NETNS at ADD; used to tell whether the holder is alive
	BootID      string `json:"bootID,omitempty"` // boot the allocation was made in

	// Identity is the pod the address belongs to (zero without pod arguments).
	Identity Identity `json:"identity,omitzero"`
	UID      string   `json:"uid,omitempty"` // K8S_POD_UID of the holder
	// PodName is the holder's own name (K8S_POD_NAME at ADD), which differs
	// from Identity.Name for a pod with stickyip.io/identity and for a
	// restored static pod. Placement publishes it: the API server lets a node
	// claim an identity only for a pod bound to it. Older binaries ignore
	// the field, so it needs no schema step.
	PodName string `json:"podName,omitempty"`

	// Duration is how long the IP stays reserved after DEL (already clamped).
	Duration time.Duration `json:"duration,omitempty"`
	// RequestedDuration is what the annotation asked for, before clamping.
	RequestedDuration time.Duration `json:"requestedDuration,omitempty"`
	Clamped           bool          `json:"clamped,omitempty"`
	// DurationFrom is who set the pod's reservation annotation when the pod
	// did not carry it itself (contract.AnnotationDurationFrom: its
	// namespace's default, or the cluster's); "" otherwise. Older binaries
	// ignore the field, so it needs no schema step.
	DurationFrom string `json:"durationFrom,omitempty"`
	// Retention is how the reservation ends: "" (contract.RetentionWorkload,
	// the default: it follows StatefulSet, once checkpointd has recorded
	// one) or contract.RetentionFixed (Duration after the DEL, whatever
	// the pod's controller does). Older binaries ignore the field, so it
	// needs no schema step.
	Retention string `json:"retention,omitempty"`
	// StatefulSet is the StatefulSet the pod's reservation follows, as
	// checkpointd last saw it (nil: none known; the reservation lasts
	// Duration after the DEL). Older binaries ignore the field: to them the
	// reservation ends at ExpiresAt.
	StatefulSet *StatefulSetRef `json:"statefulSet,omitempty"`

	AllocatedAt time.Time `json:"allocatedAt"`
	ReleasedAt  time.Time `json:"releasedAt,omitzero"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"` // Reserved and Cooling only
	// LastContainerID remembers the sandbox that held a Reserved IP.
	LastContainerID string `json:"lastContainerID,omitempty"`
	// LastIdentity is the identity that held a Cooling address (zero when
	// it had none, or when a stickyip before this field freed it). It is
	// not indexed: a cooling address belongs to nobody, it is only refused
	// to other identities that ask for it. Older binaries ignore the field,
	// so it needs no schema step.
	LastIdentity Identity `json:"lastIdentity,omitzero"`
	// Imported is set for allocations imported from a host-local data
	// directory; ImportedFrom is host-local's file for the address. While that
	// file exists host-local still has the pod; once it is gone (the pod's DEL
	// went to host-local, as flannel replays the ADD-time config) the
	// allocation is released.
	Imported     bool   `json:"imported,omitempty"`
	ImportedFrom string `json:"importedFrom,omitempty"`
}

// Expired reports whether a reservation or a cooling-down period has run out
// at now. A Held reservation never expires by time: its StatefulSet decides.
func (r *Record) Expired(now time.Time) bool {
	return r.Timed() && !r.Held() && !now.Before(r.ExpiresAt)
}

// Timed reports whether the record lasts until ExpiresAt (reserved or cooling).
func (r *Record) Timed() bool { return r.State == Reserved || r.State == Cooling }

// Validate checks a record read from disk for the fields every record must have.
func (r *Record) Validate() error {
	switch {
	case !r.IP.IsValid():
		return errors.New("record without a valid IP")
	case r.State == Allocated && r.ContainerID == "":
		return fmt.Errorf("allocated record %s without container ID", r.IP)
	case r.State == Reserved && r.Identity.IsZero():
		return fmt.Errorf("reserved record %s without pod identity", r.IP)
	case r.Timed() && r.ExpiresAt.IsZero():
		return fmt.Errorf("%s record %s without expiry", r.State, r.IP)
	case r.State == Cooling && (r.ContainerID != "" || !r.Identity.IsZero()):
		return fmt.Errorf("cooling record %s held by a sandbox or an identity", r.IP)
	case r.State != Allocated && r.State != Reserved && r.State != Cooling:
		return fmt.Errorf("record %s in unknown state %q", r.IP, r.State)
	case r.StatefulSet != nil && r.StatefulSet.Name == "":
		return fmt.Errorf("record %s follows a StatefulSet without a name", r.IP)
	}
	return nil
}

// Holder describes who holds the record, for messages.
func (r *Record) Holder() string {
	var b strings.Builder
	if r.State == Cooling {
		fmt.Fprintf(&b, "freed at %s and cooling down until %s (ipam.reservation.reuseDelay)",
			r.ReleasedAt.UTC().Format(time.RFC3339), r.ExpiresAt.UTC().Format(time.RFC3339))
		if !r.LastIdentity.IsZero() {
			fmt.Fprintf(&b, "; until then only %s, its last holder, may ask for it", r.LastIdentity.Pod())
		}
		return b.String()
	}
	if r.Held() {
		fmt.Fprintf(&b, "reserved for %s while StatefulSet %s retains it", r.Identity.Pod(), r.StatefulSet.Name)
		return b.String()
	}
	if r.State == Reserved {
		fmt.Fprintf(&b, "reserved for %s until %s", r.Identity.Pod(), r.ExpiresAt.UTC().Format(time.RFC3339))
		return b.String()
	}
	fmt.Fprintf(&b, "container %s", r.ContainerID)
	if !r.Identity.IsZero() {
		fmt.Fprintf(&b, " of pod %s", r.Identity.Pod())
		if r.UID != "" {
			fmt.Fprintf(&b, " (uid %s)", r.UID)
		}
	}
	return b.String()
}
