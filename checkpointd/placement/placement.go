// Package placement publishes the node's sticky identities into its
// namespaces' placement index (deploy/placement): for every identity this
// node holds an address for (an allocation with a reservation duration, or a
// live reservation), one entry in the IPHoldShard of the identity's shard,
// written with the node's own credentials by server-side apply under the
// node's own field manager. The stickyip-placement MutatingAdmissionPolicy
// looks the identity up there to prefer this node for a re-created pod.
//
// The index of a namespace is ShardCount objects, shard-0 … shard-f; an
// identity's shard is ShardOf(identity). Each shard maps identities to one
// Hold: the node that claimed the identity last (the one that ran its pod
// last). A node writes only its own entries and claims an identity only for
// a pod bound to it (the stickyip-iphold-writer ValidatingAdmissionPolicy
// asks the Node authorizer). A Publisher compares what the IPAM store
// implies (Desired) with what the API server last showed of each shard and
// applies the difference: a claim at ADD, an update at DEL (reserved, with
// the expiry), a release at expiry, release or take-over. Nothing on the
// node waits for the API server.
package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is the IPHoldShard resource (deploy/placement/crd.yaml).
var Resource = schema.GroupVersionResource{Group: "stickyip.io", Version: "v1alpha1", Resource: "ipholdshards"}

// Kind is the IPHoldShard kind.
const Kind = "IPHoldShard"

// ShardCount is the number of IPHoldShards of a namespace. The writer
// policy accepts exactly the names ShardName gives (shard-0 … shard-f); a
// change here is a change of the index layout, and of that policy.
const ShardCount = 16

// ShardOf returns the name of the shard that holds identity's entry:
// "shard-" and the high four bits of the identity's SHA-256, in hex
// (uniform for names as alike as a StatefulSet's).
func ShardOf(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return ShardName(int(sum[0]>>4) % ShardCount)
}

// ShardName is the name of shard i (0 ≤ i < ShardCount).
func ShardName(i int) string { return fmt.Sprintf("shard-%x", i) }

// FieldManager is the server-side apply field manager of node's writes:
// "stickyip/<node>", or, for a node name too long for a field manager (128
// characters), "stickyip/" and a hash of it. One manager per node is what
// lets the API server remove an entry the node no longer applies, and keep
// the entries of every other node.
func FieldManager(node string) string {
	if m := "stickyip/" + node; len(m) <= 128 {
		return m
	}
	sum := sha256.Sum256([]byte(node))
	return "stickyip/" + hex.EncodeToString(sum[:20])
}
