package rebuild

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	testharness "github.com/stickyip/stickyip/test/harness"
)

// TestNetnsAddrs: the addresses read from a sandbox's namespace are those
// its interfaces hold, by interface, loopback and link-local left out; a
// namespace that cannot be opened is an error naming it.
func TestNetnsAddrs(t *testing.T) {
	if os.Geteuid() != 0 {
		testharness.Missing(t, "needs root to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testharness.Missing(t, "needs ip (iproute2): %v", err)
	}
	ns := testharness.NewNetns(t, "rebuild")
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "peer0"},
		{"addr", "add", "10.9.0.5/24", "dev", "eth0"},
		{"addr", "add", "fd09::5/64", "dev", "eth0", "nodad"},
		{"addr", "add", "fe80::5/64", "dev", "eth0", "nodad"},
		{"link", "set", "eth0", "up"},
	} {
		if _, err := testharness.Run(nil, "ip", append([]string{"-n", ns.Name}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := NetnsAddrs(ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.9.0.5"), netip.MustParseAddr("fd09::5")}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("addresses by interface %v, want %v", got, want)
	}

	if _, err := NetnsAddrs("/proc/self/ns/none"); err == nil || !strings.Contains(err.Error(), "/proc/self/ns/none") {
		t.Errorf("a namespace that does not exist: %v, want an error naming it", err)
	}
}
