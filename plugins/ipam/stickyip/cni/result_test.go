package cni

import (
	"bytes"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// libraryPrint is what types.PrintResult(res, version) writes to stdout.
func libraryPrint(res *current.Result, version string) ([]byte, error) {
	r, err := res.GetAsVersion(version)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = r.PrintTo(&buf)
	return buf.Bytes(), err
}

// checkPrintResult fails t unless PrintResult writes what the CNI library
// writes (or fails as it does); it returns whether encodeResult wrote it.
func checkPrintResult(t *testing.T, res *current.Result, version string) bool {
	t.Helper()
	want, wantErr := libraryPrint(res, version)
	var got bytes.Buffer
	err := PrintResult(&got, res, version)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("version %q, result %+v:\nwrote %q (%v)\nthe CNI library writes %q (%v)", version, res, got.Bytes(), err, want, wantErr)
	}
	_, fast := encodeResult(res, version)
	return fast
}

func cidr(s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return *n
}

// TestPrintResult: the results an ADD makes, in every version, are written
// as the CNI library writes them; those of the versions runtimes use take
// the fast path.
func TestPrintResult(t *testing.T) {
	dual := &current.Result{CNIVersion: current.ImplementedSpecVersion,
		IPs: []*current.IPConfig{
			{Address: cidr("10.244.1.5/24"), Gateway: net.ParseIP("10.244.1.1")},
			{Address: cidr("fd00::5/64")},
		},
		Routes: []*types.Route{{Dst: cidr("0.0.0.0/0"), GW: net.ParseIP("10.244.1.1")}, {Dst: cidr("::/0")}},
		DNS:    types.DNS{Nameservers: []string{"10.96.0.10", "fd00::a"}, Domain: "cluster.local", Search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}},
	}
	plain := &current.Result{CNIVersion: current.ImplementedSpecVersion, IPs: []*current.IPConfig{{Address: cidr("10.244.0.7/16"), Gateway: net.ParseIP("10.244.0.1").To4()}}, Routes: []*types.Route{}}
	searchOnly := &current.Result{CNIVersion: current.ImplementedSpecVersion, IPs: plain.IPs, DNS: types.DNS{Search: []string{"a"}}}
	noIPs := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: dual.DNS}
	// Every printable ASCII character but JSON's and HTML's special ones
	// needs no escape.
	var printable []byte
	for c := byte(0x20); c <= 0x7e; c++ {
		if !bytes.ContainsRune([]byte(`"\<>&`), rune(c)) {
			printable = append(printable, c)
		}
	}
	plainText := &current.Result{CNIVersion: current.ImplementedSpecVersion, IPs: plain.IPs, DNS: types.DNS{Domain: string(printable)}}
	for _, version := range []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0"} {
		for _, res := range []*current.Result{dual, plain, searchOnly, noIPs, plainText} {
			if !checkPrintResult(t, res, version) {
				t.Errorf("version %s, %+v: not written by encodeResult", version, res)
			}
		}
	}
	idx := 0
	for _, tc := range []struct {
		version string
		res     *current.Result
	}{
		{"0.2.0", dual}, {"0.1.0", plain}, {"2.0.0", plain}, {"", plain},
		{"1.1.0", &current.Result{IPs: []*current.IPConfig{{Address: cidr("10.0.0.1/24"), Interface: &idx}}, Interfaces: []*current.Interface{{Name: "eth0"}}}},
		{"1.1.0", &current.Result{IPs: plain.IPs, Routes: []*types.Route{{Dst: cidr("10.0.0.0/8"), MTU: 1400}}}},
		{"0.3.1", &current.Result{IPs: plain.IPs, DNS: types.DNS{Domain: "<a&b>", Search: []string{"\xff", "é", "a\"b\\c\n"}}}},
		{"1.0.0", &current.Result{IPs: plain.IPs, DNS: types.DNS{Domain: "<a&b>", Search: []string{"\xff", "é", "a\"b\\c\n"}}}},
		{"1.0.0", &current.Result{IPs: plain.IPs, DNS: types.DNS{Domain: "a<b>&c"}}},
		{"0.3.1", &current.Result{IPs: plain.IPs, DNS: types.DNS{Search: []string{"x&y"}}}},
		{"1.0.0", &current.Result{IPs: plain.IPs, DNS: types.DNS{Search: []string{`x"y`}}}},
		{"1.0.0", &current.Result{IPs: []*current.IPConfig{{Address: cidr("10.0.0.1/24"), Gateway: net.IP{1, 2, 3}}}}},
	} {
		if checkPrintResult(t, tc.res, tc.version) {
			t.Errorf("version %q, %+v: written by encodeResult, want the CNI library", tc.version, tc.res)
		}
	}
}

// FuzzPrintResult: results made of the fuzzer's addresses, routes, DNS
// strings and version are written as the CNI library writes them.
func FuzzPrintResult(f *testing.F) {
	f.Add(uint8(0), []byte{10, 244, 1, 5, 24, 1}, "10.96.0.10", "cluster.local", "svc", uint8(3))
	f.Add(uint8(1), []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 64, 0}, "fd00::a", "", "<&>", uint8(4))
	f.Add(uint8(3), []byte{1, 2, 3, 4, 32, 7, 9, 9, 9, 9, 0, 1}, "\xff", "é", "a\"b", uint8(12))
	versions := []string{"1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.3.0", "0.2.0", "0.1.0", "9.9.9"}
	f.Fuzz(func(t *testing.T, v uint8, addrs []byte, ns, domain, search string, flags uint8) {
		res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
		for len(addrs) >= 6 {
			n := 4
			if addrs[0]&0x80 != 0 && len(addrs) >= 18 {
				n = 16
			}
			ip := net.IP(append([]byte(nil), addrs[:n]...))
			bits := int(addrs[n]) % (8*n + 1)
			ipn := net.IPNet{IP: ip, Mask: net.CIDRMask(bits, 8*n)}
			var gw net.IP
			if addrs[n+1]&1 != 0 {
				gw = net.IP(append([]byte(nil), addrs[:n]...))
			}
			if addrs[n+1]&2 != 0 {
				res.Routes = append(res.Routes, &types.Route{Dst: ipn, GW: gw})
			} else {
				res.IPs = append(res.IPs, &current.IPConfig{Address: ipn, Gateway: gw})
			}
			addrs = addrs[n+2:]
		}
		if flags&1 != 0 {
			res.DNS.Nameservers = []string{ns, domain}
		}
		if flags&2 != 0 {
			res.DNS.Domain = domain
		}
		if flags&4 != 0 {
			res.DNS.Search = []string{search}
		}
		if flags&8 != 0 {
			res.DNS.Options = []string{ns, search}
		}
		if flags&16 != 0 && len(res.Routes) > 0 {
			res.Routes[0].MTU = int(flags)
		}
		if flags&32 != 0 {
			res.Routes = []*types.Route{}
		}
		checkPrintResult(t, res, versions[int(v)%len(versions)])
	})
}
