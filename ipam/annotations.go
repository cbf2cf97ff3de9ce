package ipam

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// ReservationFor works out how long the pod's IP is to be kept after DEL, from the
// annotation, clamped to the configured maximum.
func (c *Config) ReservationFor() (d, requested time.Duration, clamped bool, err error) {
	v, ok := c.Annotations[contract.AnnotationReservedDuration]
	if !ok {
		return 0, 0, false, nil
	}
	requested, err = contract.ParseReservedDuration(v)
	if err != nil {
		return 0, 0, false, err
	}
	if requested > c.Reservation.MaxDuration {
		return c.Reservation.MaxDuration, requested, true, nil
	}
	return requested, requested, false, nil
}

// DurationFrom returns where the pod's reservation duration came from when
// an admission policy set it (contract.AnnotationDurationFrom:
// contract.DurationFromNamespace or contract.DurationFromCluster), "" when
// the pod carried it itself.
func (c *Config) DurationFrom() (string, error) {
	v, ok := c.Annotations[contract.AnnotationDurationFrom]
	if !ok {
		return "", nil
	}
	return contract.ParseDurationFrom(v)
}

// Retention returns how the pod's reservation ends (contract.AnnotationRetention):
// "" for the default (a StatefulSet pod's follows its StatefulSet), or
// contract.RetentionFixed.
func (c *Config) Retention() (string, error) {
	v, ok := c.Annotations[contract.AnnotationRetention]
	if !ok {
		return "", nil
	}
	r, err := contract.ParseRetention(v)
	if err != nil || r == contract.RetentionWorkload {
		return "", err
	}
	return r, nil
}

// Who is the identity a pod's addresses belong to.
type Who struct {
	// Namespace and Name are the identity (reservation.Identity): the pod's
	// namespace and name, or, for a pod annotated contract.AnnotationIdentity,
	// contract.KeyedIdentity of its value; for a restored static copy, its
	// parent's.
	Namespace, Name string
	// Pod is the name of the pod the identity stands for: the pod's own
	// (K8S_POD_NAME), or a restored copy's parent's. Placement publishes it.
	Pod string
	// ViaCheckpoint: the identity is a restored copy's parent's
	// (contract.AnnotationCheckpointOf).
	ViaCheckpoint bool
}

// IsZero reports whether the call has no pod identity.
func (w Who) IsZero() bool { return w.Namespace == "" }

// Identity returns the pod identity used for reservations.
// contract.AnnotationCheckpointOf is honoured only on static pods
// (contract.AnnotationConfigSource "file", set by the kubelet itself), so an
// API pod cannot claim another pod's IP; a pod without K8S_POD_* args has no
// identity. contract.AnnotationIdentity then makes the identity
// contract.KeyedIdentity of its value, in the pod's own namespace: never
// another namespace's, and never the pod of that name (a restored copy keeps
// its parent's annotations, so it maps to the parent's identity).
//
// A malformed contract.AnnotationIdentity is an error even on a call without
// pod arguments, as a malformed duration annotation is: bad input is
// reported, never silently ignored.
func (c *Config) Identity() (Who, error) {
	key, hasKey := c.Annotations[contract.AnnotationIdentity]
	if hasKey {
		var err error
		if key, err = contract.ParseIdentity(key); err != nil {
			return Who{}, err
		}
	}
	var w Who
	switch v, ok := c.Annotations[contract.AnnotationCheckpointOf]; {
	case ok && c.Annotations[contract.AnnotationConfigSource] == contract.ConfigSourceFile:
		ns, name, err := contract.ParseCheckpointOf(v)
		if err != nil {
			return Who{}, err
		}
		w = Who{Namespace: ns, Pod: name, ViaCheckpoint: true}
	case c.Args.Namespace == "" || c.Args.Name == "":
		return Who{}, nil
	default:
		w = Who{Namespace: c.Args.Namespace, Pod: c.Args.Name}
	}
	w.Name = w.Pod
	if hasKey {
		w.Name = contract.KeyedIdentity(key)
	}
	return w, nil
}

// AnnotatedIPs returns the addresses contract.AnnotationIPs asks for, each
// checked to lie in a range set of this network (an address outside them is
// a configuration error naming the annotation, CNI error 7). A pod whose
// namespace (K8S_POD_NAMESPACE) ipam.ipsAnnotation.namespaces does not list
// gets the same error. Which addresses may be granted at all is the
// engine's rule (Engine.Add).
func (c *Config) AnnotatedIPs() ([]netip.Addr, error) {
	v, ok := c.Annotations[contract.AnnotationIPs]
	if !ok {
		return nil, nil
	}
	ips, err := contract.ParseIPs(v)
	if err != nil {
		return nil, err
	}
	if ns := c.Args.Namespace; !c.IPsAnnotation.Allows(ns) {
		return nil, fmt.Errorf("%w: %s=%q: pods of namespace %q may not choose their addresses on network %s (ipam.ipsAnnotation.namespaces is %q)",
			contract.ErrInvalidAnnotation, contract.AnnotationIPs, contract.Clip(v, contract.ClipLen), ns, c.Name, c.IPsAnnotation.Namespaces)
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(c.Ranges, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) }) {
			return nil, fmt.Errorf("%w: %s=%q: %s is in no range of network %s (%s)", contract.ErrInvalidAnnotation,
				contract.AnnotationIPs, contract.Clip(v, contract.ClipLen), ip, c.Name, rangesString(c.Ranges))
		}
	}
	return ips, nil
}
