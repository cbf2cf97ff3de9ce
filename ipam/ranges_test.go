package ipam

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// TestRangesMatchHostLocal reads a table of configs with stickyip's parser and
// with host-local's own (imported here, in the test only) and requires the
// same verdict and, when accepted, the same canonical ranges and requested
// IPs: a config host-local accepts means the same thing to stickyip.
func TestRangesMatchHostLocal(t *testing.T) {
	for i, conf := range []string{
		`{"cniVersion":"0.3.1","name":"n","ipam":{"subnet":"10.2.0.0/24"}}`,
		`{"cniVersion":"0.3.1","name":"n","ipam":{"subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.20","gateway":"10.2.0.254"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"},{"subnet":"10.3.0.0/25","gateway":"10.3.0.100"}],[{"subnet":"fd00::/64"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.9.0.0/16","ranges":[[{"subnet":"10.2.0.0/24"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"fd00:1::/120","rangeStart":"fd00:1::10"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}]]},"runtimeConfig":{"ipRanges":[[{"subnet":"10.7.0.0/24"}]],"ips":["10.7.0.9/24"]},"args":{"cni":{"ips":["10.2.0.5"]}}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/30"}}`,
		// rejected by both
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/31"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.1/32"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.5/24"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24","rangeStart":"10.3.0.1"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24","rangeEnd":"10.2.1.1"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"10.2.0.0/25"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"},{"subnet":"10.2.0.128/25"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"},{"subnet":"fd00::/64"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{}}`,
		`{"cniVersion":"0.2.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"10.3.0.0/24"}]]}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24"},"args":{"cni":{"ips":["nonsense"]}}}`,
		`{"cniVersion":"1.0.0","name":"n"}`,
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			want, _, wantErr := allocator.LoadIPAMConfig([]byte(conf), "")
			var n netConf
			var got *hostLocalSettings
			gotErr := json.Unmarshal([]byte(conf), &n)
			if gotErr == nil {
				got, gotErr = loadHostLocal(&n)
			}
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("%s\nhost-local: %v\nstickyip:   %v", conf, wantErr, gotErr)
			}
			if wantErr != nil {
				t.Logf("both reject: host-local %q, stickyip %q", wantErr, gotErr)
				return
			}
			if len(got.Ranges) != len(want.Ranges) {
				t.Fatalf("%d range sets, host-local %d", len(got.Ranges), len(want.Ranges))
			}
			for s := range want.Ranges {
				for r := range want.Ranges[s] {
					w, g := want.Ranges[s][r], got.Ranges[s][r]
					if !w.RangeStart.Equal(g.RangeStart) || !w.RangeEnd.Equal(g.RangeEnd) || !w.Gateway.Equal(g.Gateway) ||
						(*net.IPNet)(&w.Subnet).String() != (*net.IPNet)(&g.Subnet).String() || len(w.RangeStart) != len(g.RangeStart) {
						t.Fatalf("range %d/%d: stickyip %+v, host-local %+v", s, r, g, w)
					}
					for _, probe := range []string{"10.2.0.0", "10.2.0.1", "10.2.0.10", "10.2.0.21", "10.2.0.254", "10.2.0.255", "10.3.0.127", "fd00::", "fd00::1", "fd00:1::f", "fd00:1::10", "fd00:1::ff", "10.7.0.9"} {
						ip := net.ParseIP(probe)
						if w.Contains(ip) != g.Contains(ip) {
							t.Fatalf("range %d/%d Contains(%s): stickyip %v, host-local %v", s, r, probe, g.Contains(ip), w.Contains(ip))
						}
					}
				}
			}
			if len(got.IPArgs) != len(want.IPArgs) {
				t.Fatalf("requested IPs %v, host-local %v", got.IPArgs, want.IPArgs)
			}
			for k := range want.IPArgs {
				if !want.IPArgs[k].Equal(got.IPArgs[k]) {
					t.Fatalf("requested IPs %v, host-local %v", got.IPArgs, want.IPArgs)
				}
			}
		})
	}
}
