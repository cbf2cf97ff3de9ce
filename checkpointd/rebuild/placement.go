package rebuild

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
)

// OwnReader reads the node's own entries of the placement index
// (placement.Publisher.ReadOwn).
type OwnReader interface {
	ReadOwn(ctx context.Context, node *corev1.Node) ([]placement.Own, error)
}

// PlacementIndex is the Index of the node's placement entries, read by
// the publisher that writes them (from the shards it has written to).
type PlacementIndex struct{ Reader OwnReader }

// ReadOwn returns the node's entries. An address that does not parse is
// left out (the publisher never writes one).
func (x PlacementIndex) ReadOwn(ctx context.Context, node *corev1.Node) ([]IndexEntry, error) {
	own, err := x.Reader.ReadOwn(ctx, node)
	if err != nil {
		return nil, err
	}
	out := make([]IndexEntry, 0, len(own))
	for _, o := range own {
		e := IndexEntry{Namespace: o.Namespace, Identity: o.Identity, Pod: o.Pod, Since: o.Since, Until: o.Until, Disowned: !o.Owned, LaterBy: o.LaterBy}
		for _, s := range o.IPs {
			if ip, err := netip.ParseAddr(s); err == nil {
				e.IPs = append(e.IPs, ip.Unmap())
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// podCIDRs returns the Node's pod CIDRs (nil for a nil Node, or none).
func podCIDRs(n *corev1.Node) []netip.Prefix {
	if n == nil {
		return nil
	}
	return kube.PodCIDRs(n)
}
