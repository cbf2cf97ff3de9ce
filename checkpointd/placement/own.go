package placement

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Own is one of the node's entries in the index, in its namespace, with
// what its shard says of it.
type Own struct {
	Namespace string
	Line
	// Owned: the shard lists the node as an owner under its Node's UID
	// (under any UID when the caller knows none). The entries of a Node
	// deleted and registered again under the same name are not: the garbage
	// collector removed that Node's reference, and the placement hint
	// counts them no more.
	Owned bool
	// LaterBy names another owner of the shard that claimed the identity
	// later (a larger seq: it ran the pod since); "" when none did.
	LaterBy string
}

// ReadOwn returns the node's entries in every shard it has written to (the
// file of written shards) and in every shard its Node lists
// (ShardsAnnotation; node may be nil), as the API server has them now: what
// the node held when it last published, its reservations' ends included. A
// store rebuilt after damage, or made anew on a node re-installed under the
// same name, takes its reservations back from them. The shards that hold
// its entries join the written set, so that the publisher keeps them equal
// to the store from then on. A shard that cannot be read is an error naming
// it; an entry that cannot be read is skipped.
func (p *Publisher) ReadOwn(ctx context.Context, node *corev1.Node) ([]Own, error) {
	refs := p.written.refs()
	for _, r := range listedOn(node) {
		if !slices.Contains(refs, r) {
			refs = append(refs, r)
		}
	}
	slices.SortFunc(refs, compareRefs)
	var uid types.UID
	if node != nil {
		uid = node.UID
	}
	var out []Own
	for _, ref := range refs {
		rctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
		p.reads.Inc()
		s, err := p.api.Get(rctx, ref.Namespace, ref.Name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("placement shard %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		lines, _ := s.Lines(p.opts.Node)
		if len(lines) == 0 {
			continue
		}
		owned := s.ownedAs(p.opts.Node, uid)
		for _, l := range lines {
			o := Own{Namespace: ref.Namespace, Line: l, Owned: owned}
			if n, later, ok := latest(s.Others(p.opts.Node, l.Identity)); ok && later.Seq > l.Seq {
				o.LaterBy = n
			}
			out = append(out, o)
		}
		if err := p.written.mark(ref, true); err != nil {
			p.fail("written", ref.Namespace+"/"+ref.Name, err)
		}
	}
	return out, nil
}

// ownedAs reports whether node owns the shard under uid (any UID when uid
// is empty): OwnedBy, and the reference is that very Node's.
func (s *Shard) ownedAs(node string, uid types.UID) bool {
	return slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool {
		return r.Kind == "Node" && r.Name == node && r.APIVersion == "v1" && (uid == "" || r.UID == uid)
	})
}
