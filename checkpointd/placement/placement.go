// Package placement publishes the node's sticky identities into its
// namespaces' placement index (deploy/placement): for every identity this
// node holds an address for (an allocation with a reservation duration, or a
// live reservation), one entry in the index shard of the identity, written
// with the node's own credentials by server-side apply under the node's own
// field manager. The stickyip-placement MutatingAdmissionPolicy looks the
// identity up there to prefer this node for a re-created pod.
//
// The index of a namespace is at most ShardCount ConfigMaps,
// stickyip-placement-0 … stickyip-placement-f, labelled IndexLabel; an
// identity's shard is ShardOf(identity). ConfigMaps rather than a custom
// resource because the API server hands a typed parameter object to the
// policy's CEL without copying it: a lookup costs the same whatever the size
// of the index, where a custom resource is converted whole for every pod
// creation. Each shard maps identities to one Hold: the node that claimed
// the identity last (the one that ran its pod last). A node writes only its
// own entries and claims an identity only for a pod bound to it (the
// stickyip-placement-index ValidatingAdmissionPolicy asks the Node
// authorizer). A Publisher compares what the IPAM store implies (Desired)
// with what the API server last showed of each shard and applies the
// difference: a claim at ADD, a release at expiry or release. Nothing on the
// node waits for the API server.
package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// IndexLabel marks the ConfigMaps of the placement index; its value is the
// shard's number in hex. The placement policy's binding selects its
// parameters by it.
const IndexLabel = "stickyip.io/placement-index"

// ShardPrefix starts the name of every shard.
const ShardPrefix = "stickyip-placement-"

// ShardCount is the number of shards of a namespace's index. The writer
// policy and RBAC accept exactly the names ShardName gives
// (stickyip-placement-0 … stickyip-placement-f); a change here is a change
// of the index layout, and of deploy/placement.
const ShardCount = 16

// ShardOf returns the name of the shard that holds identity's entry:
// ShardPrefix and the high four bits of the identity's SHA-256, in hex
// (uniform for names as alike as a StatefulSet's).
func ShardOf(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return ShardName(int(sum[0]>>4) % ShardCount)
}

// ShardName is the name of shard i (0 ≤ i < ShardCount).
func ShardName(i int) string { return fmt.Sprintf("%s%x", ShardPrefix, i) }

// shardNumber is the IndexLabel value of the shard named name.
func shardNumber(name string) string { return strings.TrimPrefix(name, ShardPrefix) }

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
