package placementv1

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stickyip/stickyip/contract"
)

// The placement index is a set of ConfigMaps in each namespace, its
// shards, written by stickyip-controller alone: data maps identities to
// the node that holds each. ConfigMaps, not a custom resource: the hint
// reads the shards as its parameters, and kube-apiserver 1.37 converts a
// custom resource parameter whole, through JSON, at every evaluation,
// where a ConfigMap is read a key at a time (docs/DESIGN.md).
//
// A ConfigMap key is at most 253 characters, the length of each form of
// identity alone: so a pod-named identity ("db-0") and a keyed one
// ("identity:db") live in shards of two series, each keyed by the name
// itself (Names: "db-0"; Keyed: "db"). The series is the shard's IndexLabel
// value and is in its name: stickyip-placement-names-0,
// stickyip-placement-keyed-0, and so on.

// IndexLabel marks a shard; the hint's binding selects its parameters by
// it. Its value is the shard's series.
const IndexLabel = "stickyip.io/placement-index"

// Series of shards.
const (
	Names = "names"
	Keyed = "keyed"
)

// ShardPrefix starts every shard's name.
const ShardPrefix = "stickyip-placement-"

// ShardBytes is how much of keys and node names the controller puts into
// one shard before it opens the next: about 3,000 identities of the
// longest form, tens of thousands of short ones, under a ConfigMap's 1 MiB.
const ShardBytes = 768 << 10

// maxShard bounds a shard's number: far more than a namespace can need
// (ShardBytes each), few enough digits that a name stays short.
const maxShard = 1 << 20

// ShardName is the name of shard i of series.
func ShardName(series string, i int) string { return fmt.Sprintf("%s%s-%d", ShardPrefix, series, i) }

// ParseShardName returns the series and number of a shard's name; false
// for a name no shard has (ShardName's, numbers without leading zeros).
func ParseShardName(name string) (series string, number int, ok bool) {
	rest, ok := strings.CutPrefix(name, ShardPrefix)
	if !ok {
		return "", 0, false
	}
	series, s, ok := strings.Cut(rest, "-")
	if !ok || (series != Names && series != Keyed) || s == "" || (s[0] == '0' && s != "0") || strings.TrimLeft(s, "0123456789") != "" {
		return "", 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n >= maxShard {
		return "", 0, false
	}
	return series, n, true
}

// ShardKey returns the series and key of identity (an Entry's Identity):
// Keyed and the stickyip.io/identity value for a keyed identity, Names and
// the identity for a pod-named one.
func ShardKey(identity string) (series, key string) {
	if k, keyed := contract.IdentityKey(identity); keyed {
		return Keyed, k
	}
	return Names, identity
}

// ShardIdentity is the identity of key in a shard of series (ShardKey's
// inverse).
func ShardIdentity(series, key string) string {
	if series == Keyed {
		return contract.KeyedIdentity(key)
	}
	return key
}

// MergeShard adds the data of a shard of series to index, identity → node,
// as the hint reads it.
func MergeShard(index map[string]string, series string, data map[string]string) {
	for key, node := range data {
		index[ShardIdentity(series, key)] = node
	}
}
