// Package placement publishes the node's sticky identities as IPHold records
// (deploy/placement): one API object per identity this node holds an address
// for (an allocation with a reservation duration, or a live reservation),
// written with the node's own credentials. The stickyip-placement
// MutatingAdmissionPolicy reads them to prefer this node for a re-created pod
// of the same identity.
//
// A Publisher compares the records the IPAM store implies (Desired) with the
// node's own records as one list+watch sees them (field selector
// spec.nodeName=<node>) and writes the difference: a create at ADD, an update
// at DEL (reserved, with the expiry), a delete at expiry, release or
// take-over. Nothing on the node waits for the API server.
package placement

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stickyip/stickyip/reservation"
)

// Resource is the IPHold resource (deploy/placement/crd.yaml).
var Resource = schema.GroupVersionResource{Group: "stickyip.io", Version: "v1alpha1", Resource: "ipholds"}

// Kind is the IPHold kind.
const Kind = "IPHold"

// NodeField is the selectable field that names the record's node.
const NodeField = "spec.nodeName"

// Record states, as the store names them.
const (
	StateAllocated = string(reservation.Allocated)
	StateReserved  = string(reservation.Reserved)
)

// Record is one IPHold as the node means it to be.
type Record struct {
	Namespace string // the pod's namespace
	Name      string // ObjectName
	Spec      Spec
}

// Spec is an IPHold's spec.
type Spec struct {
	Identity  string    `json:"identity"`
	Network   string    `json:"network"`
	IfName    string    `json:"ifName,omitempty"`
	NodeName  string    `json:"nodeName"`
	IPs       []string  `json:"ips"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Equal reports whether two specs say the same (expiry to the second, as the
// API stores it).
func (s Spec) Equal(o Spec) bool {
	return s.Identity == o.Identity && s.Network == o.Network && s.IfName == o.IfName && s.NodeName == o.NodeName &&
		slices.Equal(s.IPs, o.IPs) && s.State == o.State &&
		s.ExpiresAt.Truncate(time.Second).Equal(o.ExpiresAt.Truncate(time.Second))
}

// ObjectName is the record's name: readable (identity and node first) and
// unique per (node, network, identity, interface) through a hash of all
// four, so two nodes holding one identity write two objects. Names too long
// for the API are the hash alone.
func ObjectName(node, network, identity, ifname string) string {
	sum := sha256.Sum256([]byte(node + "\x00" + network + "\x00" + identity + "\x00" + ifname))
	h := hex.EncodeToString(sum[:])
	if n := identity + "." + node + "." + h[:10]; len(n) <= 253 {
		return n
	}
	return "h" + h[:40]
}

// Desired returns the records node should have, keyed by namespace/name:
// one per identity (network, namespace, name, interface) that holds an
// allocation with a reservation duration or a reservation that has not
// expired at now. Allocations without a duration, cooling addresses and
// anonymous records are not sticky: no record.
func Desired(node string, entries []reservation.Entry, now time.Time) map[string]Record {
	out := map[string]Record{}
	for _, e := range entries {
		id := e.Identity
		if id.IsZero() {
			continue
		}
		switch {
		case e.State == reservation.Allocated && e.Duration > 0:
		case e.State == reservation.Reserved && !e.Expired(now):
		default:
			continue
		}
		name := ObjectName(node, e.Network, id.Name, id.IfName)
		key := id.Namespace + "/" + name
		r, ok := out[key]
		if !ok {
			r = Record{Namespace: id.Namespace, Name: name, Spec: Spec{
				Identity: id.Name, Network: e.Network, IfName: id.IfName, NodeName: node, State: StateReserved}}
		}
		r.Spec.IPs = append(r.Spec.IPs, e.IP.String())
		if e.State == reservation.Allocated {
			r.Spec.State = StateAllocated
		} else if e.ExpiresAt.After(r.Spec.ExpiresAt) {
			r.Spec.ExpiresAt = e.ExpiresAt
		}
		out[key] = r
	}
	for k, r := range out {
		if r.Spec.State == StateAllocated {
			r.Spec.ExpiresAt = time.Time{}
		}
		slices.SortFunc(r.Spec.IPs, func(a, b string) int {
			return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
		})
		out[k] = r
	}
	return out
}
