package rebuild

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/test/harness/strict"
)

// TestNetnsAddrs: the addresses read from a sandbox's namespace are those
// its interfaces hold, by interface, loopback and link-local left out; a
// namespace that cannot be opened is an error naming it.
func TestNetnsAddrs(t *testing.T) {
	if os.Geteuid() != 0 {
		strict.Missing(t, "needs root to make a network namespace")
	}
	ns := sandboxNetns(t, "10.9.0.5/24", "fd09::5/64", "fe80::5/64")
	got, err := NetnsAddrs(fmt.Sprintf("/proc/self/fd/%d", ns))
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

// sandboxNetns makes a network namespace, gone when the test ends, whose
// eth0 (one end of a veth pair) is up with addrs, and returns a descriptor
// of it.
func sandboxNetns(t *testing.T, addrs ...string) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // and the thread enters it
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread would stay in the test's namespace
		}
	}()
	t.Cleanup(func() { ns.Close() })
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}); err != nil {
		t.Fatal(err)
	}
	eth0, err := netlink.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip, ipn, err := net.ParseCIDR(a)
		if err != nil {
			t.Fatal(err)
		}
		ipn.IP = ip
		if err := netlink.AddrAdd(eth0, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(eth0); err != nil {
		t.Fatal(err)
	}
	return ns
}
