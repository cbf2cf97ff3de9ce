package rebuild

import (
	"context"
	"net/netip"

	"github.com/stickyip/stickyip/checkpointd/placement"
)

// OwnReader reads the node's own entries of the placement index
// (placement.Publisher.ReadOwn).
type OwnReader interface {
	ReadOwn(ctx context.Context) ([]placement.Own, error)
}

// PlacementIndex is the Index of the node's placement entries, read by
// the publisher that writes them (from the shards it has written to).
type PlacementIndex struct{ Reader OwnReader }

// ReadOwn returns the node's entries. An address that does not parse is
// left out (the publisher never writes one).
func (x PlacementIndex) ReadOwn(ctx context.Context) ([]IndexEntry, error) {
	own, err := x.Reader.ReadOwn(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]IndexEntry, 0, len(own))
	for _, o := range own {
		e := IndexEntry{Namespace: o.Namespace, Identity: o.Identity, Pod: o.Pod, Since: o.Since, Until: o.Until}
		for _, s := range o.IPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				e.IPs = append(e.IPs, ip.Unmap())
			}
		}
		out = append(out, e)
	}
	return out, nil
}
