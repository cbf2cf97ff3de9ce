package entry

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/stickyip/stickyip/contract"
)

// Listed is the list of shards that hold a node's entries, as its Node's
// annotation stickyip.io/placement-shards says it: by namespace, the
// numbers of the shards (0 to Shards-1). Written "<namespace>/<numbers>"
// separated by spaces, each number one hex digit, as in "apps/05 db/3".
type Listed map[string][]int

// Shards is the number of shards of a namespace's index (placement.ShardCount).
const Shards = 8

// shardDigits are the shard numbers as they are written.
var shardDigits = "0123456789abcdef"[:Shards]

// Format renders l by namespace, each namespace's numbers in order, in at
// most limit characters: namespaces beyond it are left out (ok false).
func (l Listed) Format(limit int) (value string, ok bool) {
	var b strings.Builder
	ok = true
	for _, ns := range slices.Sorted(maps.Keys(l)) {
		var nums strings.Builder
		for _, n := range slices.Compact(slices.Sorted(slices.Values(l[ns]))) {
			if n >= 0 && n < Shards {
				nums.WriteByte(shardDigits[n])
			}
		}
		if nums.Len() == 0 {
			continue
		}
		tok := ns + "/" + nums.String()
		if b.Len() > 0 {
			tok = " " + tok
		}
		if b.Len()+len(tok) > limit {
			ok = false
			continue
		}
		b.WriteString(tok)
	}
	return b.String(), ok
}

// ParseListed reads the annotation's value; a token that cannot be read is
// skipped and reported, so that one bad token never hides the others (a
// node writes only what Format writes; another hand may have edited it).
func ParseListed(v string) (l Listed, bad []error) {
	l = Listed{}
	for _, tok := range strings.Fields(v) {
		ns, nums, found := strings.Cut(tok, "/")
		if !found || !contract.IsNamespace(ns) || nums == "" || strings.Trim(nums, shardDigits) != "" {
			bad = append(bad, fmt.Errorf("%q is not <namespace>/<shard numbers 0 to %d>", contract.Clip(tok, contract.ClipLen), Shards-1))
			continue
		}
		for _, c := range nums {
			if n := strings.IndexRune(shardDigits, c); !slices.Contains(l[ns], n) {
				l[ns] = append(l[ns], n)
			}
		}
	}
	for ns := range l {
		slices.Sort(l[ns])
	}
	return l, bad
}
