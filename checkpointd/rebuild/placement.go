package rebuild

import (
	"context"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

// IndexEntry is one of the node's own entries in its NodeRecord, with the
// controller's verdict on it.
type IndexEntry struct {
	Namespace string
	// Identity is the reservation's identity: a pod name, or
	// identity:<key> (what ipam.Config.Identity returns).
	Identity string
	// Pod and PodUID name the pod whose ADD holds (or last held) it: the
	// record put back keeps the UID, which the controller's verdicts name.
	Pod    string
	PodUID string
	IPs    []netip.Addr
	Since  time.Time
	// Until is the reservation's end; zero while a sandbox held the
	// addresses when the entry was written, or while its StatefulSet keeps
	// it (Held).
	Until time.Time
	// Held: a reservation its StatefulSet keeps (no time ends it);
	// StatefulSet names it when the controller said which.
	Held        bool
	StatefulSet *reservation.StatefulSetRef
	// Disowned: the record was written under an earlier Node of the
	// node's name (deleted and registered again): its entries count for
	// nothing. LaterBy is set when another node claimed the identity later
	// (it ran the pod since).
	Disowned bool
	LaterBy  string
}

// Index reads the node's own entries (node: as the watch last saw it; nil
// when unknown). An error the API server answered with (it refused: no
// placement manifests, no RBAC) is read as "no index"; any other (it is
// away) as "not yet".
type Index interface {
	ReadOwn(ctx context.Context, node *corev1.Node) ([]IndexEntry, error)
}

// RecordReader reads the node's NodeRecord (placement.API).
type RecordReader interface {
	Get(ctx context.Context) (*placementv1.NodeRecord, error)
}

// RecordIndex is the Index of the node's own NodeRecord: the one object
// only the node writes, so what it takes back is what it said itself.
type RecordIndex struct{ Reader RecordReader }

// ReadOwn returns the record's entries; none when there is no record. An
// address that does not parse is left out (the publisher never writes
// one).
func (x RecordIndex) ReadOwn(ctx context.Context, node *corev1.Node) ([]IndexEntry, error) {
	r, err := x.Reader.Get(ctx)
	if err != nil || r == nil {
		return nil, err
	}
	verdict := map[[2]string]placementv1.Claim{}
	if r.Status.NodeUID == r.Spec.NodeUID {
		for _, c := range r.Status.Claims {
			verdict[[2]string{c.Namespace, c.Identity}] = c
		}
	}
	out := make([]IndexEntry, 0, len(r.Spec.Entries))
	for _, e := range r.Spec.Entries {
		ie := IndexEntry{Namespace: e.Namespace, Identity: e.Identity, Pod: e.Pod, PodUID: string(e.PodUID), Since: e.Since.Time, Held: e.Held,
			Disowned: node != nil && r.Spec.NodeUID != node.UID}
		if e.Until != nil {
			ie.Until = e.Until.Time
		}
		c := verdict[[2]string{e.Namespace, e.Identity}]
		if c.Accepted() && !c.Indexed {
			ie.LaterBy = "another node"
		}
		if s := c.StatefulSet; s != nil {
			ie.StatefulSet = &reservation.StatefulSetRef{Name: s.Name, UID: string(s.UID), Why: s.Why}
		}
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				ie.IPs = append(ie.IPs, ip.Unmap())
			}
		}
		out = append(out, ie)
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
