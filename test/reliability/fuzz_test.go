//go:build reliability

package reliability

import (
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// knownCodes are the CNI error codes the plugin may return (docs/troubleshooting.md,
// "CNI errors", plus the CNI library's own 1, 4, 6 and 7). 999 (internal error) is not in
// it: an error the plugin did not classify is a finding.
var knownCodes = map[uint]bool{1: true, 4: true, 5: true, 6: true, 7: true, 11: true, 100: true, 101: true, 102: true}

// FuzzPluginInput feeds fuzzed CNI_ARGS, annotations (reservation duration,
// stickyip.io/identity and stickyip.io/ips; the last two only when not
// empty), subnet and gateway to the real plugin binary. Whatever the input,
// the plugin must not panic, must print exactly one CNI object on stdout (a
// result with addresses from the configured subnet, or an error with a known
// code and a readable message), an ADD asking for an address by annotation
// that succeeded must have got exactly that address, and an ADD that
// succeeded must be undone by its DEL.
func FuzzPluginInput(f *testing.F) {
	seeds := []struct{ args, anno, identity, ips, subnet, gateway string }{
		{podArgs("default", "web", "uid-1", "c1"), "5", "", "", "10.250.0.0/24", ""},
		{podArgs("default", "web", "uid-1", "c1"), "90s", "", "", "10.250.0.0/24", "10.250.0.1"},
		{podArgs("default", "web", "uid-1", "c1"), "1e309", "", "", "10.250.0.0/24", ""},
		{podArgs("default", "web", "uid-1", "c1"), "-5", "", "", "fd00::/120", ""},
		{podArgs("default", "web", "uid-1", "c1"), "99999999999999999999", "", "", "10.250.0.7/32", "banana"},
		{"K8S_POD_NAMESPACE=default;K8S_POD_NAME", "", "", "", "10.250.0/24", ""},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;IP=10.250.0.9", "0", "", "", "10.250.0.0/28", ""},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;IP=fe80::1%eth0", "1h", "", "", "10.250.0.0/30", ""},
		{podArgs("default", "web-5d8f7-abcde", "uid-1", "c1"), "10", "web", "", "10.250.0.0/24", ""},
		{podArgs("default", "web", "uid-1", "c1"), "10", "other/ns", "", "10.250.0.0/24", ""},
		{podArgs("default", "reg", "uid-1", "c1"), "10", "", "10.250.0.50", "10.250.0.0/24", ""},
		{podArgs("default", "reg", "uid-1", "c1"), "", "", "10.250.0.50,fd00::5", "fd00::/120", ""},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;IP=10.250.0.9", "", "", "10.250.0.10", "10.250.0.0/28", ""},
		{"", "", "", "", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.args, s.anno, s.identity, s.ips, s.subnet, s.gateway)
	}
	p := &plugin{}
	f.Fuzz(func(t *testing.T, args, anno, identity, ips, subnet, gateway string) {
		if p.Path == "" {
			p.Path = pluginPath(t)
		}
		// The kernel refuses NUL in environment variables, and JSON needs UTF-8;
		// neither can reach the plugin from a runtime.
		if strings.ContainsRune(args, 0) || !utf8.ValidString(anno+identity+ips+subnet+gateway) || len(args) > 100000 {
			t.Skip()
		}
		base := t.TempDir()
		dataDir := filepath.Join(base, "data")
		conf := netConf("fuzznet", dataDir, filepath.Join(base, "plugin.log"))
		r := map[string]any{"subnet": subnet}
		if gateway != "" {
			r["gateway"] = gateway
		}
		ipamOf(conf)["ranges"] = []any{[]any{r}}
		annotations := map[string]string{annoDuration: anno}
		if identity != "" {
			annotations[annoIdentity] = identity
		}
		if ips != "" {
			annotations[annoIPs] = ips
		}
		stdin := encodeConf(t, withAnnotations(conf, annotations))
		c := cniCall{Command: "ADD", ContainerID: "fuzz1", Netns: goneNetns(t), IfName: "eth0", Args: args, Stdin: stdin}
		o := p.CNI(c)
		if o.Panicked() || o.Signal != 0 || o.TimedOut {
			t.Fatalf("plugin crashed: %s", o.Describe())
		}
		if o.StdoutBad != "" {
			t.Fatalf("%s: %s", o.StdoutBad, o.Describe())
		}
		if o.Err != nil {
			if !knownCodes[o.Err.Code] {
				t.Fatalf("unexpected error code: %s", o.Err)
			}
			if o.Err.Msg == "" || len(o.Err.Msg)+len(o.Err.Details) > 2048 {
				t.Fatalf("error message empty or unreadably long (%d bytes)", len(o.Err.Msg)+len(o.Err.Details))
			}
			return
		}
		// The config format (CNI's types.IPNet, as in host-local) parses subnets
		// with net.ParseCIDR, which also takes a prefix length like "00".
		_, ipnet, err := net.ParseCIDR(subnet)
		if err != nil {
			t.Fatalf("ADD succeeded with subnet %q that is not a CIDR: %s", subnet, o.Describe())
		}
		ones, _ := ipnet.Mask.Size()
		netAddr, _ := netip.AddrFromSlice(ipnet.IP)
		prefix := netip.PrefixFrom(netAddr.Unmap(), ones)
		addrs := o.Result.Addrs()
		if len(addrs) != 1 {
			t.Fatalf("ADD returned %v, want one address", addrs)
		}
		a, err := netip.ParseAddr(addrs[0])
		if err != nil || !prefix.Masked().Contains(a) {
			t.Fatalf("ADD returned %s, outside %s", addrs[0], subnet)
		}
		// Never the gateway, the network or (IPv4) the broadcast address.
		never := []netip.Addr{prefix.Masked().Addr(), prefix.Masked().Addr().Next()}
		if g, err := netip.ParseAddr(gateway); err == nil {
			never[1] = g.Unmap()
		}
		if a.Is4() {
			b := prefix.Masked().Addr().As4()
			for i := range b {
				b[i] |= ^net.CIDRMask(ones, 32)[i]
			}
			never = append(never, netip.AddrFrom4(b))
		}
		if slices.Contains(never, a) {
			t.Fatalf("ADD returned %s, one of %v (network, gateway, broadcast of %s)", a, never, subnet)
		}
		if ips != "" {
			// One range set: the annotation named exactly one address.
			want, err := netip.ParseAddr(strings.TrimSpace(ips))
			if err != nil || want.Unmap() != a {
				t.Fatalf("ADD with %s=%q succeeded with %s", annoIPs, ips, a)
			}
		}
		if identity != "" && (strings.Contains(identity, "/") || len(identity) > 253) {
			t.Fatalf("ADD with %s=%q succeeded: a key must not reach into another namespace", annoIdentity, identity)
		}
		c.Command = "DEL"
		if d := p.CNI(c); !d.OK() {
			t.Fatalf("DEL after a successful ADD: %s", d.Describe())
		}
	})
}
