package ipamstore

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stickyip/stickyip/reservation"
)

// A node registered again with another podCIDR, as checkpointd sees it on a
// flannel node whose lease (subnet.env) is not renewed yet: the store
// records the change, drops the old range's reservation, and neither the
// old range's allocation nor anything outside the network's range is an
// address the node holds; once flanneld writes the new lease, an address of
// the new range is.
func TestNodeRangesOnAFlannelNode(t *testing.T) {
	confDir, subnetEnv := t.TempDir(), filepath.Join(t.TempDir(), "subnet.env")
	dir := filepath.Join(t.TempDir(), "stickyip")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(confDir, "10-flannel.conflist"), `{"cniVersion":"0.3.1","name":"cbr0","plugins":[
	  {"type":"flannel","subnetFile":"`+subnetEnv+`","ipam":{"type":"stickyip","dataDir":"`+dir+`"},"delegate":{"isDefaultGateway":true}}]}`)
	lease := func(subnet string) {
		write(subnetEnv, "FLANNEL_NETWORK=10.211.0.0/16\nFLANNEL_SUBNET="+subnet+"\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	}
	lease("10.211.1.1/24")
	seed(t, dir,
		rec("10.211.1.2", "reserved", "", "db", "db-0", 0),
		rec("10.211.1.3", "allocated", "c1", "db", "web", 0),
	)
	s := newStore(dir).WithCNIConfDir(confDir)
	old, now := []netip.Prefix{netip.MustParsePrefix("10.211.1.0/24")}, []netip.Prefix{netip.MustParsePrefix("10.211.3.0/24")}

	n, dropped, changed, err := s.SetNodeRanges(old)
	if err != nil || !changed || len(dropped) != 0 || len(n.Retired) != 0 {
		t.Fatalf("first record: %+v, dropped %v, changed %v, %v", n, dropped, changed, err)
	}
	if _, _, changed, err := s.SetNodeRanges(old); err != nil || changed {
		t.Errorf("the same ranges again: changed %v, %v", changed, err)
	}
	n, dropped, changed, err = s.SetNodeRanges(now)
	if err != nil || !changed || len(n.Retired) != 1 {
		t.Fatalf("the new podCIDR: %+v, changed %v, %v", n, changed, err)
	}
	if len(dropped) != 1 || dropped[0].IP.String() != "10.211.1.2" || dropped[0].Network != "cbr0" {
		t.Errorf("dropped %v, want db-0's reservation 10.211.1.2 on cbr0", dropped)
	}
	if got, err := s.NodeRanges(); err != nil || got.String() != n.String() {
		t.Errorf("NodeRanges() = %v, %v; want %v", got, err, n)
	}
	entry := func(ip string) reservation.Entry {
		return reservation.Entry{Network: "cbr0", Record: &reservation.Record{IP: netip.MustParseAddr(ip)}}
	}
	holds, err := s.NodeHolds()
	if err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{"10.211.1.3": false, "10.211.3.5": false, "10.88.0.5": false} {
		if got := holds(entry(ip)); got != want {
			t.Errorf("before the new lease: node holds %s: %v, want %v", ip, got, want)
		}
	}
	lease("10.211.3.1/24")
	if holds, err = s.NodeHolds(); err != nil {
		t.Fatal(err)
	}
	for ip, want := range map[string]bool{"10.211.1.3": false, "10.211.3.5": true} {
		if got := holds(entry(ip)); got != want {
			t.Errorf("after the new lease: node holds %s: %v, want %v", ip, got, want)
		}
	}
}
