package placementv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeRecord is what one node holds: its name is the node's.
type NodeRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeRecordSpec   `json:"spec,omitempty"`
	Status NodeRecordStatus `json:"status,omitempty"`
}

// NodeRecordSpec is written by the node alone.
type NodeRecordSpec struct {
	// NodeUID is the UID of the Node the entries were written under: a Node
	// deleted and registered again under the same name has another, and the
	// entries of the earlier one count for nothing.
	NodeUID types.UID `json:"nodeUID"`
	// Entries are the node's sticky identities, sorted by namespace and
	// identity, at most MaxEntries.
	Entries []Entry `json:"entries,omitempty"`
}

// Entry is one sticky identity a node holds: an allocation whose pod has
// a reservation duration, or a live reservation.
type Entry struct {
	Namespace string `json:"namespace"`
	// Identity is the pod's name, or "identity:" and its
	// stickyip.io/identity (contract.KeyedIdentity).
	Identity string `json:"identity"`
	// Pod and PodUID name the pod whose ADD holds (or last held) the
	// addresses.
	Pod    string    `json:"pod"`
	PodUID types.UID `json:"podUID"`
	// Since is that ADD's time.
	Since metav1.Time `json:"since"`
	// Until is when the reservation ends; nil while a sandbox holds the
	// addresses, or while its StatefulSet keeps the reservation (Held).
	Until *metav1.Time `json:"until,omitempty"`
	// Held: a reservation its StatefulSet keeps; no time ends it.
	Held bool `json:"held,omitempty"`
	// Addresses are the identity's addresses on this node, canonical.
	Addresses []string `json:"addresses"`
}

// Running reports whether a sandbox holds the entry's addresses.
func (e *Entry) Running() bool { return e.Until == nil && !e.Held }

// NodeRecordStatus is written by stickyip-controller alone.
type NodeRecordStatus struct {
	// NodeUID is the Node UID the claims were judged under; claims judged
	// under another count for nothing.
	NodeUID types.UID `json:"nodeUID,omitempty"`
	// ObservedGeneration is the spec's generation the claims answer.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Claims is the controller's verdict on each entry, sorted by
	// namespace and identity.
	Claims []Claim `json:"claims,omitempty"`
}

// Claim is the controller's verdict on one entry of a record.
type Claim struct {
	Namespace string `json:"namespace"`
	Identity  string `json:"identity"`
	// Pod, PodUID and Created name the last pod of the identity the
	// controller saw bound to the node (empty: none): the claim counts
	// with that pod's creation time. A pod's name, UID and node never
	// change, so an accepted claim stays accepted while the node lists
	// the identity.
	Pod     string      `json:"pod,omitempty"`
	PodUID  types.UID   `json:"podUID,omitempty"`
	Created metav1.Time `json:"created,omitempty"`
	// Refused says why the entry's pod was not accepted ("": it was).
	Refused string `json:"refused,omitempty"`
	// Indexed: the index names this node for the identity; false when
	// another node's claim is later (the pod runs there now), or when the
	// claim is refused.
	Indexed bool `json:"indexed,omitempty"`
	// StatefulSet is set for the pod of a StatefulSet: how its
	// reservation follows it.
	StatefulSet *Retention `json:"statefulSet,omitempty"`
}

// Accepted reports whether the claim counts.
func (c *Claim) Accepted() bool { return c.PodUID != "" }

// Retention is the controller's account of a StatefulSet pod's claim on
// its volume, which its reservation follows.
type Retention struct {
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
	// Owner is what owns the pod's volume claims, as the StatefulSet
	// controller sets it while the pod exists: OwnerStatefulSet,
	// OwnerPod, or "" (no owner: nothing deletes them).
	Owner string `json:"owner,omitempty"`
	// Verdict is Hold or Release.
	Verdict string `json:"verdict"`
	// Why says what keeps the reservation, or ended it, and what would.
	Why string `json:"why"`
}

// Owners of a StatefulSet pod's volume claims.
const (
	OwnerStatefulSet = "StatefulSet"
	OwnerPod         = "Pod"
)

// Verdicts on a StatefulSet pod's reservation.
const (
	// Hold: the volume claim stays; so does the reservation.
	Hold = "Hold"
	// Release: the volume claim is deleted (or would be); so is the
	// reservation.
	Release = "Release"
)

// NodeRecordList is a list of NodeRecords.
type NodeRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRecord `json:"items"`
}
