// Package claims checks what a node says it holds against the pod it names.
// A node's record (placementv1.NodeRecord) lists one entry per sticky
// identity; the controller accepts an entry's pod only when the pod itself
// backs it, and writes the verdict into the record's status as a Claim:
//
//	rule (Judge)                                               verdict
//	record's spec.nodeUID is not its Node's UID (Counts)       nothing of the record counts
//	claim already accepted for the entry's pod                 kept: a pod's name, UID and node never change
//	pod of the entry's UID: live, or deleted < tombstone TTL    checked below
//	  other namespace / other name                             refused
//	  not bound yet                                            pending (the binding may not be seen yet), then refused
//	  bound to another node                                    refused
//	  kubernetes.io/config.mirror, or a Node owner reference   refused: a node made it
//	  identity ('identity:' + stickyip.io/identity, else name)
//	  not the entry's                                          refused
//	  else                                                     accepted, counted from the pod's creation
//	no such pod (or deleted longer ago than the TTL)
//	  the former index holds the node's line for it            accepted, counted from the entry's since
//	  seen for less than the pending time                      pending (the cache may not have it yet)
//	  else                                                     refused (naming the UID the name has, if any)
//
// A refusal keeps the earlier accepted pod of the identity (if any): it
// still counts, with its own creation time. The rules are what the node
// cannot forge: a pod's UID, name, namespace and node are fixed at its
// creation and binding, a mirror pod or a Node-owned pod is one a node may
// create of any name, and the identity annotation is one a node may not
// change (the stickyip-pod-identity policy).
package claims

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

// Counts reports whether the entries of record count: its Node exists
// (nodeUID not empty) under the UID the record was written for. why says
// why not.
func Counts(record *placementv1.NodeRecord, nodeUID types.UID) (ok bool, why string) {
	switch {
	case nodeUID == "":
		return false, fmt.Sprintf("no Node %s", record.Name)
	case record.Spec.NodeUID != nodeUID:
		return false, fmt.Sprintf("written for Node uid %s, Node %s is uid %s", record.Spec.NodeUID, record.Name, nodeUID)
	}
	return true, ""
}

// Outcome is what Judge did with an entry.
type Outcome int

// Outcomes of Judge.
const (
	// Kept: the claim was accepted for this pod before; nothing to check.
	Kept Outcome = iota
	// Accepted: the pod backs the entry.
	Accepted
	// Imported: the pod is gone, the former index backs the entry.
	Imported
	// Pending: the pod is not known (yet); ask again by RetryAt.
	Pending
	// Refused: the pod does not back the entry (Rule, Claim.Refused).
	Refused
)

// Rules a refusal names (Result.Rule): one Event per node and rule at most
// so often.
const (
	RuleNamespace = "namespace"
	RuleName      = "name"
	RuleNode      = "node"
	RuleMirror    = "mirror"
	RuleNodeOwner = "node-owner"
	RuleIdentity  = "identity"
	RuleUnknown   = "unknown"
)

// Input is one entry of a record and what the controller knows of its pod.
type Input struct {
	// Node is the record's (and its node's) name.
	Node  string
	Entry placementv1.Entry
	// Prev is the entry's claim as judged before under the same Node UID
	// (nil: none).
	Prev *placementv1.Claim
	// Pod is the pod of Entry.PodUID: live, or as last seen before its
	// deletion at DeletedAt (nil: not known).
	Pod       *facts.Pod
	DeletedAt time.Time
	// Named is the pod the cache holds under the entry's namespace and pod
	// name (nil: none), to name its UID in a refusal.
	Named *facts.Pod
	// Former: the former index holds the node's line for the entry's
	// identity and pod.
	Former bool
	// PendingSince is when the controller first found the pod unknown
	// (zero: now).
	PendingSince time.Time
	Now          time.Time
	// TombstoneTTL is how long a deleted pod's facts still check a claim;
	// PendingFor how long an unknown pod is waited for.
	TombstoneTTL, PendingFor time.Duration
}

// Result is the verdict on one entry.
type Result struct {
	// Claim is the entry's claim, Indexed and StatefulSet not set.
	Claim   placementv1.Claim
	Outcome Outcome
	// Rule names the rule a refusal broke.
	Rule string
	// RetryAt is when a pending entry is judged again (refused then).
	RetryAt time.Time
}
