package placement

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// ShardsAnnotation, on the node's own Node, lists the shards that hold the
// node's entries (entry.Listed): "<namespace>/<shard numbers>" separated by
// spaces, as in "apps/05 db/3" (stickyip-index-0 and -5 of apps,
// stickyip-index-3 of db).
// The list of shards a node wrote to is also kept on its disk
// (WrittenFileName), which a re-installed node no longer has: the Node, kept
// under the same name, tells it where its entries are, in the read it makes
// anyway (its watch of its own Node), and an empty or absent list that it
// holds none, which a new node needs to know to start at once. Only the node
// writes its Node's annotations (NodeRestriction: a node may change no
// other Node; a Node deleted and registered again starts without it).
const ShardsAnnotation = "stickyip.io/placement-shards"

// MaxListed bounds the annotation's value (characters): far more than the
// shards a node's entries can fill (one shard per identity at most, and a
// node holds at most its pod CIDR's addresses), far less than the 256 KiB
// the API server allows a Node's annotations.
const MaxListed = 32 << 10

// The shard numbers of the annotation are this package's (a compile-time
// check: a negative constant does not convert to uint).
const _ = uint(ShardCount-entry.Shards) + uint(entry.Shards-ShardCount)

// formatListed renders refs as the annotation's value (entry.Listed), in
// at most MaxListed characters (ok is false when some are left out).
func formatListed(refs []shardRef) (value string, ok bool) {
	l := entry.Listed{}
	for _, r := range refs {
		n, err := strconv.ParseUint(shardNumber(r.Name), 16, 8)
		if err == nil {
			l[r.Namespace] = append(l[r.Namespace], int(n))
		}
	}
	return l.Format(MaxListed)
}

// parseListed reads the annotation's value (entry.ParseListed: what cannot
// be read is skipped).
func parseListed(v string) []shardRef {
	l, _ := entry.ParseListed(v)
	var refs []shardRef
	for ns, nums := range l {
		for _, n := range nums {
			refs = append(refs, shardRef{Namespace: ns, Name: ShardName(n)})
		}
	}
	slices.SortFunc(refs, compareRefs)
	return refs
}

// listedOn returns the shards node's Node lists (none for a nil Node).
func listedOn(node *corev1.Node) []shardRef {
	if node == nil {
		return nil
	}
	return parseListed(node.Annotations[ShardsAnnotation])
}

// Lists reports whether node's Node lists any shard: a node that lists none
// has no entry in the index (checkpointd keeps the list whole while it
// holds entries).
func Lists(node *corev1.Node) bool { return len(listedOn(node)) > 0 }

// list keeps the Node's annotation listing every shard that holds the
// node's entries (the written set): it is read once (at the first pass that
// has shards to list) and written when a shard is missing from it, then
// listing exactly the written set (shards the node left meanwhile stay
// listed until then: at worst one read each when the node is re-installed).
// A failure is logged and tried again at the next pass.
func (p *Publisher) list(ctx context.Context) {
	refs := p.written.refs()
	if len(refs) == 0 || p.listed != nil && subsetOf(refs, p.listed) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if p.listed == nil {
		p.reads.Inc()
		v, err := p.api.Listed(ctx)
		if err != nil {
			p.fail("list", "", fmt.Errorf("read Node %s's %s: %w", p.opts.Node, ShardsAnnotation, err))
			return
		}
		p.listed = setOf(parseListed(v))
		if subsetOf(refs, p.listed) {
			p.ok("list")
			return
		}
	}
	value, complete := formatListed(refs)
	if err := p.api.List(ctx, value); err != nil {
		p.fail("list", "", fmt.Errorf("write Node %s's %s: %w", p.opts.Node, ShardsAnnotation, err))
		return
	}
	if !complete {
		p.fail("full", "", fmt.Errorf("Node %s's %s lists %d characters of shards at most: a node re-installed would not find the rest", p.opts.Node, ShardsAnnotation, MaxListed))
	} else {
		p.ok("list")
	}
	p.listed = setOf(refs)
	p.nodeWrites.Inc()
	p.opts.Log.Info("placement: the Node lists the shards holding its entries", "annotation", ShardsAnnotation, "value", value)
}

func setOf(refs []shardRef) map[shardRef]bool {
	out := make(map[shardRef]bool, len(refs))
	for _, r := range refs {
		out[r] = true
	}
	return out
}

func subsetOf(refs []shardRef, set map[shardRef]bool) bool {
	return !slices.ContainsFunc(refs, func(r shardRef) bool { return !set[r] })
}
