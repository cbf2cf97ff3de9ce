package contract

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const lease1 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

func TestParseFlannelLease(t *testing.T) {
	l, err := ParseFlannelLease([]byte(lease1))
	if err != nil || l.Subnet.String() != "10.244.1.1/24" || l.String() != "10.244.1.0/24" || !l.Contains(netip.MustParseAddr("10.244.1.77")) {
		t.Fatalf("Parse: %+v %v", l, err)
	}
	dual, err := ParseFlannelLease([]byte(lease1 + "FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n"))
	if err != nil || len(dual.Subnets()) != 2 {
		t.Fatalf("dual-stack: %+v %v", dual, err)
	}
	for name, in := range map[string]string{
		"no subnet":          "FLANNEL_NETWORK=10.244.0.0/16\n",
		"outside network":    "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.9.1.1/24\n",
		"wider than network": "FLANNEL_NETWORK=10.244.0.0/24\nFLANNEL_SUBNET=10.244.0.1/16\n",
		"v6 in v4 key":       "FLANNEL_SUBNET=fd00::1/64\n",
		"not key=value":      "FLANNEL_SUBNET 10.244.1.1/24\n",
		"bad mtu":            "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=9\n",
		"huge":               strings.Repeat("#", maxFlannelLeaseSize+1),
	} {
		if _, err := ParseFlannelLease([]byte(in)); !errors.Is(err, ErrInvalidFlannelLease) {
			t.Errorf("%s: err %v, want ErrInvalidFlannelLease", name, err)
		}
	}
}

func FuzzParseFlannelLease(f *testing.F) {
	f.Add([]byte(lease1))
	f.Add([]byte("FLANNEL_IPV6_SUBNET=fd00::1/64\n"))
	f.Add([]byte("=\n\n#x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseFlannelLease(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidFlannelLease) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(l.Subnets()) == 0 {
			t.Fatalf("accepted a lease without a subnet: %q", data)
		}
		for _, p := range []struct{ n, s netip.Prefix }{{l.Network, l.Subnet}, {l.Network6, l.Subnet6}} {
			if p.n.IsValid() && p.s.IsValid() && !p.n.Masked().Contains(p.s.Addr()) {
				t.Fatalf("accepted subnet %s outside network %s", p.s, p.n)
			}
		}
	})
}
