// Package subnetenv reads flannel's subnet file (/run/flannel/subnet.env),
// which flanneld writes with the node's lease and the flannel CNI plugin
// reads for the node's pod range: the stickyip operator tool and
// checkpointd read it the same way.
package contract

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPath is where flanneld writes the node's lease.
const DefaultPath = "/run/flannel/subnet.env"

// maxSize bounds what is read as a lease.
const maxSize = 4096

// Lease is a parsed subnet.env.
type Lease struct {
	// Network and Subnet are FLANNEL_NETWORK and FLANNEL_SUBNET (IPv4);
	// Subnet keeps flannel's form, the gateway address with the prefix length.
	Network, Subnet netip.Prefix
	// Network6 and Subnet6 are the IPv6 pair, when flannel runs dual-stack.
	Network6, Subnet6 netip.Prefix
}

// Subnets returns the node's pod subnets (masked).
func (l Lease) Subnets() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{l.Subnet, l.Subnet6} {
		if p.IsValid() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Contains reports whether a is in one of the node's pod subnets.
func (l Lease) Contains(a netip.Addr) bool {
	for _, p := range l.Subnets() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (l Lease) String() string {
	var s []string
	for _, p := range l.Subnets() {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// ErrInvalid is wrapped by Parse's errors.
var ErrInvalid = errors.New("invalid flannel subnet file")

// Parse reads a subnet.env: KEY=VALUE lines; FLANNEL_SUBNET (or
// FLANNEL_IPV6_SUBNET) required, each inside its FLANNEL_*NETWORK when given.
func Parse(data []byte) (Lease, error) {
	bad := func(format string, args ...any) (Lease, error) {
		return Lease{}, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if len(data) > maxSize {
		return bad("%d bytes, more than %d", len(data), maxSize)
	}
	var l Lease
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok || k == "" {
			return bad("line %d is not KEY=VALUE", line)
		}
		var dst *netip.Prefix
		switch k {
		case "FLANNEL_NETWORK":
			dst = &l.Network
		case "FLANNEL_SUBNET":
			dst = &l.Subnet
		case "FLANNEL_IPV6_NETWORK":
			dst = &l.Network6
		case "FLANNEL_IPV6_SUBNET":
			dst = &l.Subnet6
		case "FLANNEL_MTU":
			if n, err := strconv.Atoi(v); err != nil || n < 68 || n > 65535 {
				return bad("FLANNEL_MTU=%q", Clip(v, ClipLen))
			}
			continue
		default:
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return bad("%s=%q: %v", k, Clip(v, ClipLen), err)
		}
		*dst = p
	}
	if err := sc.Err(); err != nil {
		return bad("%v", err)
	}
	if !l.Subnet.IsValid() && !l.Subnet6.IsValid() {
		return bad("no FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET")
	}
	for _, pair := range []struct {
		network, subnet netip.Prefix
		v4              bool
	}{{l.Network, l.Subnet, true}, {l.Network6, l.Subnet6, false}} {
		for _, p := range []netip.Prefix{pair.network, pair.subnet} {
			if p.IsValid() && p.Addr().Is4() != pair.v4 {
				return bad("%s is of the wrong address family", p)
			}
		}
		if pair.subnet.IsValid() && pair.network.IsValid() &&
			(pair.network.Bits() > pair.subnet.Bits() || !pair.network.Masked().Contains(pair.subnet.Addr())) {
			return bad("subnet %s is not inside network %s", pair.subnet, pair.network)
		}
	}
	return l, nil
}
