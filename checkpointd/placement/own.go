package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Own is one of the node's entries in the index, in its namespace.
type Own struct {
	Namespace string
	Line
}

// ReadOwn returns the node's entries in every shard it has written to (the
// file of written shards), as the API server has them now: what the node
// held when it last published, its reservations' ends included. A store
// rebuilt after damage takes its reservations back from them. A shard that
// cannot be read is an error naming it; an entry that cannot be read is
// skipped.
func (p *Publisher) ReadOwn(ctx context.Context) ([]Own, error) {
	refs := slices.SortedFunc(maps.Keys(p.written.set), compareRefs)
	var out []Own
	for _, ref := range refs {
		rctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
		s, err := p.api.Get(rctx, ref.Namespace, ref.Name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("placement shard %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		lines, _ := s.Lines(p.opts.Node)
		for _, l := range lines {
			out = append(out, Own{Namespace: ref.Namespace, Line: l})
		}
	}
	return out, nil
}
