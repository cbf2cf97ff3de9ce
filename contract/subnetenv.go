package contract

// flannel's subnet file (/run/flannel/subnet.env): flanneld writes the
// node's lease there and the flannel CNI plugin reads the node's pod range
// from it; the stickyip operator tool and checkpointd read it the same way.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// maxFlannelLeaseSize bounds what is read as a lease.
const maxFlannelLeaseSize = 4096

// FlannelLease is a parsed subnet.env: the node's lease.
type FlannelLease struct {
	// Network and Subnet are FLANNEL_NETWORK and FLANNEL_SUBNET (IPv4);
	// Subnet keeps flannel's form, the gateway address with the prefix length.
	Network, Subnet netip.Prefix
	// Network6 and Subnet6 are the IPv6 pair, when flannel runs dual-stack.
	Network6, Subnet6 netip.Prefix
}

// Subnets returns the node's pod subnets (masked).
func (l FlannelLease) Subnets() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{l.Subnet, l.Subnet6} {
		if p.IsValid() {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Contains reports whether a is in one of the node's pod subnets.
func (l FlannelLease) Contains(a netip.Addr) bool {
	for _, p := range l.Subnets() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (l FlannelLease) String() string {
	var s []string
	for _, p := range l.Subnets() {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// ErrInvalidFlannelLease is wrapped by ParseFlannelLease's errors.
var ErrInvalidFlannelLease = errors.New("invalid flannel subnet file")

// ParseFlannelLease reads a subnet.env: KEY=VALUE lines; FLANNEL_SUBNET (or
// FLANNEL_IPV6_SUBNET) required, each inside its FLANNEL_*NETWORK when given.
func ParseFlannelLease(data []byte) (FlannelLease, error) {
	bad := func(format string, args ...any) (FlannelLease, error) {
		return FlannelLease{}, fmt.Errorf("%w: %s", ErrInvalidFlannelLease, fmt.Sprintf(format, args...))
	}
	if len(data) > maxFlannelLeaseSize {
		return bad("%d bytes, more than %d", len(data), maxFlannelLeaseSize)
	}
	var l FlannelLease
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
