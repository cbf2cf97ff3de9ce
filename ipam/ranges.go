package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/contract"
)

// Range is one address range of a range set, in host-local's configuration
// format: a subnet, optionally narrowed by rangeStart/rangeEnd, and a gateway
// that is never handed out.
//
// stickyip reads the same keys with the same defaults and checks as
// host-local (ranges_test.go compares the two on a table of configs) but does
// not import host-local's allocator package: that package links netlink,
// iptables and knftables, whose initialisation alone cost about 0.4 ms of
// every plugin start when measured (GODEBUG=inittrace=1).
type Range struct {
	RangeStart net.IP      `json:"rangeStart,omitempty"` // first address, inclusive
	RangeEnd   net.IP      `json:"rangeEnd,omitempty"`   // last address, inclusive
	Subnet     types.IPNet `json:"subnet"`
	Gateway    net.IP      `json:"gateway,omitempty"`
}

// RangeSet is a list of ranges of one address family; a pod gets one address
// from each range set.
type RangeSet []Range

// to4 returns ip in 4-byte form when it is IPv4, else its 16-byte form.
func to4(ip net.IP) (net.IP, error) {
	if v4 := ip.To4(); v4 != nil {
		return v4, nil
	}
	if len(ip) == net.IPv6len {
		return ip, nil
	}
	return nil, fmt.Errorf("IP %s not v4 nor v6", ip)
}

func nextIP(ip net.IP) net.IP {
	out := make(net.IP, len(ip))
	copy(out, ip)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]++
		if out[i] != 0 {
			break
		}
	}
	return out
}

func cmpIP(a, b net.IP) int { return strings.Compare(string(a.To16()), string(b.To16())) }

// Canonicalize checks the range and fills rangeStart, rangeEnd and gateway
// with host-local's defaults: the gateway and the start default to the
// subnet's first address, the end to its last (IPv4: the one before the
// broadcast address).
func (r *Range) Canonicalize() error {
	ip, err := to4(r.Subnet.IP)
	if err != nil {
		return err
	}
	r.Subnet.IP = ip
	ones, bits := r.Subnet.Mask.Size()
	if ones > bits-2 {
		return fmt.Errorf("network %s too small to allocate from", (*net.IPNet)(&r.Subnet))
	}
	if len(r.Subnet.IP) != len(r.Subnet.Mask) {
		return errors.New("IPNet IP and Mask version mismatch")
	}
	if network := r.Subnet.IP.Mask(r.Subnet.Mask); !r.Subnet.IP.Equal(network) {
		return fmt.Errorf("network has host bits set; for a subnet mask of length %d the network address is %s", ones, network)
	}
	for _, f := range []struct {
		ip  *net.IP
		key string
		def func() net.IP
	}{
		{&r.Gateway, "gateway", func() net.IP { return nextIP(r.Subnet.IP) }},
		{&r.RangeStart, "rangeStart", func() net.IP { return nextIP(r.Subnet.IP) }},
		{&r.RangeEnd, "rangeEnd", func() net.IP { return lastAddr(r.Subnet) }},
	} {
		if *f.ip == nil {
			*f.ip = f.def()
			continue
		}
		v, err := to4(*f.ip)
		if err != nil {
			return fmt.Errorf("%s: %w", f.key, err)
		}
		*f.ip = v
		if f.key != "gateway" && !r.Contains(v) {
			return fmt.Errorf("%s %s not in network %s", f.key, v, (*net.IPNet)(&r.Subnet))
		}
	}
	return nil
}

// lastAddr is the subnet's last address; for IPv4 the one before broadcast.
func lastAddr(subnet types.IPNet) net.IP {
	end := broadcastAddr(subnet)
	if len(end) == net.IPv4len {
		end[3]--
	}
	return end
}

// broadcastAddr is the subnet's all-ones address (IPv4: its broadcast address).
func broadcastAddr(subnet types.IPNet) net.IP {
	end := make(net.IP, len(subnet.IP))
	for i := range subnet.IP {
		end[i] = subnet.IP[i] | ^subnet.Mask[i]
	}
	return end
}

// Contains reports whether addr is an allocatable address of the range.
func (r *Range) Contains(addr net.IP) bool {
	a, err := to4(addr)
	if err != nil || len(a) != len(r.Subnet.IP) || !(*net.IPNet)(&r.Subnet).Contains(a) {
		return false
	}
	if r.RangeStart != nil && cmpIP(a, r.RangeStart) < 0 {
		return false
	}
	return r.RangeEnd == nil || cmpIP(a, r.RangeEnd) <= 0
}

// Overlaps reports whether two ranges share an address.
func (r *Range) Overlaps(o *Range) bool {
	if len(r.RangeStart) != len(o.RangeStart) {
		return false
	}
	return r.Contains(o.RangeStart) || r.Contains(o.RangeEnd) || o.Contains(r.RangeStart) || o.Contains(r.RangeEnd)
}

func (r *Range) String() string { return r.RangeStart.String() + "-" + r.RangeEnd.String() }

// Canonicalize checks and completes every range of the set: at least one, all
// of one family, none overlapping.
func (s RangeSet) Canonicalize() error {
	if len(s) == 0 {
		return errors.New("empty range set")
	}
	fam := 0
	for i := range s {
		if err := s[i].Canonicalize(); err != nil {
			return err
		}
		if i == 0 {
			fam = len(s[i].RangeStart)
		} else if fam != len(s[i].RangeStart) {
			return errors.New("mixed address families")
		}
	}
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[i].Overlaps(&s[j]) {
				return fmt.Errorf("subnets %s and %s overlap", s[i].String(), s[j].String())
			}
		}
	}
	return nil
}

// Contains reports whether addr is in one of the set's ranges.
func (s RangeSet) Contains(addr net.IP) bool { return s.RangeFor(addr) != nil }

// RangeFor returns the range of the set holding addr, or nil.
func (s RangeSet) RangeFor(addr net.IP) *Range {
	for i := range s {
		if s[i].Contains(addr) {
			return &s[i]
		}
	}
	return nil
}

// Overlaps reports whether two range sets share an address.
func (s RangeSet) Overlaps(o RangeSet) bool {
	for i := range s {
		for j := range o {
			if s[i].Overlaps(&o[j]) {
				return true
			}
		}
	}
	return false
}

func (s RangeSet) String() string {
	parts := make([]string, len(s))
	for i := range s {
		parts[i] = s[i].String()
	}
	return strings.Join(parts, ",")
}

// ipArg is a requested address, given as "10.1.2.3" or "10.1.2.3/24".
type ipArg net.IP

func (a *ipArg) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if ip, _, err := net.ParseCIDR(s); err == nil {
		*a = ipArg(ip)
		return nil
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return fmt.Errorf("invalid IP %q", contract.Clip(s, contract.ClipLen))
	}
	*a = ipArg(ip)
	return nil
}

// hostLocalSettings is what LoadConfig takes from host-local's keys.
type hostLocalSettings struct {
	Ranges     []RangeSet
	Routes     []*types.Route
	DataDir    string
	ResolvConf string
	IPArgs     []net.IP
	CNIVersion string
}

// loadHostLocal reads host-local's keys as host-local does: the legacy single
// range first, then the ranges of the ipRanges capability before the
// configured ones, requested IPs from args.cni.ips and the ips capability.
func loadHostLocal(n *netConf) (*hostLocalSettings, error) {
	if n.IPAM == nil {
		return nil, errors.New(`IPAM config missing "ipam" key`)
	}
	h := &hostLocalSettings{Routes: n.IPAM.Routes, DataDir: n.IPAM.DataDir, ResolvConf: n.IPAM.ResolvConf, CNIVersion: n.CNIVersion}
	var reqs []ipArg
	if n.Args != nil && n.Args.CNI != nil {
		reqs = append(reqs, n.Args.CNI.IPs...)
	}
	reqs = append(reqs, n.RuntimeConfig.IPs...)
	for _, r := range reqs {
		ip, err := to4(net.IP(r))
		if err != nil {
			return nil, fmt.Errorf("cannot understand ip: %v", err)
		}
		h.IPArgs = append(h.IPArgs, ip)
	}
	ranges := n.IPAM.Ranges
	if n.IPAM.Range.Subnet.IP != nil {
		ranges = append([]RangeSet{{n.IPAM.Range}}, ranges...)
	}
	ranges = append(n.RuntimeConfig.IPRanges, ranges...)
	if len(ranges) == 0 {
		return nil, errors.New("no IP ranges specified")
	}
	v4, v6 := 0, 0
	for i := range ranges {
		if err := ranges[i].Canonicalize(); err != nil {
			return nil, fmt.Errorf("invalid range set %d: %s", i, err)
		}
		if len(ranges[i][0].RangeStart) == net.IPv4len {
			v4++
		} else {
			v6++
		}
	}
	if (v4 > 1 || v6 > 1) && !atLeast030(n.CNIVersion) {
		return nil, fmt.Errorf("CNI version %v does not support more than 1 address per family", n.CNIVersion)
	}
	for i := range ranges {
		for j := i + 1; j < len(ranges); j++ {
			if ranges[i].Overlaps(ranges[j]) {
				return nil, fmt.Errorf("range set %d overlaps with %d", i, j)
			}
		}
	}
	h.Ranges = ranges
	return h, nil
}

// atLeast030 reports whether a cniVersion is 0.3.0 or later ("" counts as
// 0.1.0, as in the CNI library).
func atLeast030(v string) bool {
	switch v {
	case "", "0.1.0", "0.2.0":
		return false
	}
	return true
}

func rangesString(sets []RangeSet) string {
	var s []string
	for _, rs := range sets {
		s = append(s, rs.String())
	}
	return strings.Join(s, "; ")
}
