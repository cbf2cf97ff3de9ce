package rebuild

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
)

// IndexEntry is one of the node's own lines in the placement index
// (design: `<identity> <pod> <seq> <since> <until> <ip>[,<ip>…]` under the
// node's key of a shard in the pod's namespace).
type IndexEntry struct {
	Namespace string
	// Identity is the reservation's identity: a pod name, or
	// identity:<key> (what ipam.Config.Identity returns).
	Identity string
	Pod      string
	IPs      []netip.Addr
	Since    time.Time
	// Until is the reservation's end; zero ("-") while a sandbox held the
	// addresses when the line was written.
	Until time.Time
	// Disowned: the shard does not count the entry as the node's (its
	// reference to the node names an earlier Node of the same name, or
	// there is none); LaterBy names a node that claimed the identity later.
	Disowned bool
	LaterBy  string
}

// Index reads the node's own entries of the placement index, in every
// namespace (placement.ReadOwn): in the shards the node wrote to and those
// its Node lists (node: as the watch last saw it; nil when unknown). An
// error the API server answered with (it refused: no placement manifests,
// no RBAC) is read as "no index"; any other (it is away) as "not yet".
type Index interface {
	ReadOwn(ctx context.Context, node *corev1.Node) ([]IndexEntry, error)
}

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
