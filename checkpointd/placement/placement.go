// Package placement publishes the node's sticky identities into its
// namespaces' placement index (deploy/placement): for every identity this
// node holds an address for (an allocation with a reservation duration, or a
// live reservation), one entry in its value of the identity's shard,
// written with the node's own credentials. The stickyip-placement
// MutatingAdmissionPolicy looks the identity up there to send a re-created
// pod to the node that ran it last.
//
// The index of a namespace is at most ShardCount ConfigMaps,
// stickyip-index-0 … stickyip-index-7, labelled IndexLabel; an identity's
// shard is ShardOf(identity), a sum the index policy computes too. Each data
// key of a shard is a node's name, and only that node writes it: its value
// is the node's entries there, one per line (package entry), so that a
// node never touches another's entries, and a parameter handed to the
// policy's CEL has one key per node, not per identity (kube-apiserver 1.36
// converts every parameter at every pod creation: its cost follows the
// keys). A claim carries the shard's resourceVersion, which the API server
// checks, so the node that claimed an identity last is known without
// trusting any clock; a node claims an identity only for a pod bound to it
// (the stickyip-placement-index ValidatingAdmissionPolicy asks the Node
// authorizer). A Publisher compares what the IPAM store implies (Desired)
// with what the API server last showed of each shard and writes the
// difference: a claim at ADD, the reservation's end at DEL, a release at
// expiry or release. Nothing on the node waits for the API server.
package placement

import (
	"fmt"
	"strings"
)

// IndexLabel marks the ConfigMaps of the placement index; its value is the
// shard's number in hex. The placement policy's binding selects its
// parameters by it.
const IndexLabel = "stickyip.io/index"

// ShardPrefix starts the name of every shard.
const ShardPrefix = "stickyip-index-"

// ShardCount is the number of shards of a namespace's index. The index
// policy and RBAC accept exactly the names ShardName gives
// (stickyip-index-0 … stickyip-index-7); a change here is a change of the
// index layout, and of deploy/placement.
const ShardCount = 8

// ShardAlphabet numbers the characters an identity may hold (a pod name, or
// "identity:" and one): the index policy and the placement policy use the
// same positions in CEL.
const ShardAlphabet = "-.0123456789:abcdefghijklmnopqrstuvwxyz"

// ShardOf returns the name of the shard that holds identity's entries: from
// the positions in ShardAlphabet of its last character and the one before
// it (0 when there is none; -1 for a character not in the alphabet),
// last + 3 × before, modulo ShardCount. Two characters, not all of them:
// the API server computes it at every sticky pod's creation, once per shard
// of the namespace, and a sum over every character cost milliseconds there.
// The last two characters are what varies among a workload's names (db-0 …
// db-7 fall into 8 shards, db-0 … db-159 19 to 21 per shard). Fixed
// forever: every node and both policies must agree on it.
func ShardOf(identity string) string {
	pos := func(i int) int {
		if i < 0 {
			return 0
		}
		return strings.IndexByte(ShardAlphabet, identity[i])
	}
	n := len(identity)
	if n == 0 {
		return ShardName(0)
	}
	h := pos(n-1) + 3*pos(n-2)
	return ShardName(((h % ShardCount) + ShardCount) % ShardCount)
}

// ShardName is the name of shard i (0 ≤ i < ShardCount).
func ShardName(i int) string { return fmt.Sprintf("%s%x", ShardPrefix, i) }

// shardNumber is the IndexLabel value of the shard named name.
func shardNumber(name string) string { return strings.TrimPrefix(name, ShardPrefix) }

// FieldManager is the field manager of every node's writes. One name for
// all: the API server keeps one managedFields entry per field manager and
// works through all of them at every write, so that a manager per node made
// a write to a shard of 100 nodes cost 17 ms of the API server's time, most
// of a write's cost. Who wrote a key is its name; nothing reads managedFields.
const FieldManager = "stickyip-placement"
