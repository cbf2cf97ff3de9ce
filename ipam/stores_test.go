package ipam

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
)

func writeConfFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNetworkStores: each stickyip network of the conf dir with its data
// directory and host-local directory (defaults where unset), found without
// flannel's subnet file; other IPAMs and second files of a network (the
// runtime ignores them) left out; a file that does not parse and a relative
// directory named as problems.
func TestNetworkStores(t *testing.T) {
	dir := t.TempDir()
	flannel := writeConfFile(t, dir, "10-flannel.conflist", `{"name":"cbr0","cniVersion":"0.3.1","plugins":[
		{"type":"flannel","subnetFile":"/nonexistent/subnet.env","ipam":{"type":"stickyip"}},{"type":"portmap"}]}`)
	macvlan := writeConfFile(t, dir, "20-macvlan.conflist", `{"name":"edge","cniVersion":"1.0.0","plugins":[
		{"type":"macvlan","ipam":{"type":"stickyip","subnet":"192.168.5.0/24","dataDir":"/var/lib/edge/","hostLocalDataDir":""}}]}`)
	writeConfFile(t, dir, "30-hostlocal.conf", `{"name":"plain","type":"bridge","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}`)
	writeConfFile(t, dir, "40-cbr0-again.conflist", `{"name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"/elsewhere"}}]}`)
	broken := writeConfFile(t, dir, "50-broken.conflist", `{"name":`)
	relative := writeConfFile(t, dir, "60-relative.conflist", `{"name":"rel","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"var/lib/x"}}]}`)

	got, problems, err := NetworkStores(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []NetworkStore{
		{Network: "cbr0", DataDir: contract.DefaultDataDir, HostLocalDataDir: contract.DefaultHostLocalDataDir, File: flannel},
		{Network: "edge", DataDir: "/var/lib/edge", HostLocalDataDir: "", File: macvlan},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NetworkStores:\n got %+v\nwant %+v", got, want)
	}
	all := strings.Join(problems, "\n")
	if len(problems) != 2 || !strings.Contains(all, broken) || !strings.Contains(all, relative) || !strings.Contains(all, "ipam.dataDir") {
		t.Errorf("problems %q: want the broken file and the relative dataDir named", problems)
	}

	if got, problems, err := NetworkStores(filepath.Join(dir, "missing")); err != nil || len(got) != 0 || len(problems) != 0 {
		t.Errorf("a missing conf dir: %v %v %v, want nothing", got, problems, err)
	}
}

// FuzzNetworkStores: whatever a conf file holds, NetworkStores does not
// panic, and every store it returns is a named network with a clean
// absolute data directory.
func FuzzNetworkStores(f *testing.F) {
	for _, s := range []string{
		`{"name":"cbr0","plugins":[{"type":"flannel","ipam":{"type":"stickyip"}}]}`,
		`{"name":"n","type":"bridge","ipam":{"type":"stickyip","dataDir":"/a/../b/","hostLocalDataDir":null}}`,
		`{"name":"n","plugins":[{"type":"x","ipam":{"type":"stickyip","dataDir":7}}]}`,
		`{"name":"n","plugins":[{"type":"x","ipam":[]}]}`, `{"name":""}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "10-x.conflist"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		stores, _, err := NetworkStores(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range stores {
			if s.Network == "" || !filepath.IsAbs(s.DataDir) || filepath.Clean(s.DataDir) != s.DataDir {
				t.Fatalf("store %+v from %q", s, data)
			}
		}
	})
}

// TestStoreMaxDuration: no reservation in a store outlives the longest
// reservation.maxDuration of the networks that keep their records there
// (the default when none says); a network of another store does not count,
// and a reservation block that does not load is an error naming its file.
func TestStoreMaxDuration(t *testing.T) {
	dir := t.TempDir()
	writeConfFile(t, dir, "10-a.conflist", `{"name":"a","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"/var/lib/s","reservation":{"maxDuration":"2h"}}}]}`)
	writeConfFile(t, dir, "20-b.conflist", `{"name":"b","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"/var/lib/s/","reservation":{"maxDuration":"6h"}}}]}`)
	writeConfFile(t, dir, "30-c.conflist", `{"name":"c","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"/var/lib/other","reservation":{"maxDuration":"48h"}}}]}`)
	writeConfFile(t, dir, "40-d.conflist", `{"name":"d","plugins":[{"type":"bridge","ipam":{"type":"host-local","dataDir":"/var/lib/s"}}]}`)
	if d, err := StoreMaxDuration(dir, "/var/lib/s"); err != nil || d != 6*time.Hour {
		t.Fatalf("two networks in /var/lib/s: %v (%v), want 6h", d, err)
	}
	if d, err := StoreMaxDuration(dir, "/var/lib/none"); err != nil || d != contract.DefaultMaxDuration {
		t.Fatalf("no network in the store: %v (%v), want the default %v", d, err, contract.DefaultMaxDuration)
	}
	bad := writeConfFile(t, dir, "50-e.conflist", `{"name":"e","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"/var/lib/s","reservation":{"maxDuration":"forever"}}}]}`)
	if _, err := StoreMaxDuration(dir, "/var/lib/s"); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "ipam.reservation.maxDuration") {
		t.Fatalf("a maxDuration that does not parse: %v, want an error naming %s and the key", err, bad)
	}
	if _, err := StoreMaxDuration(filepath.Join(dir, "["), "/var/lib/s"); err == nil {
		t.Fatal("a directory the glob cannot read: no error")
	}
}

// TestStickyipNetworks: the stickyip networks of a conf dir, parsed as a
// call would be; a flannel network without ranges takes its node subnet
// from the subnet file, and one whose subnet file cannot be read is a
// problem naming it.
func TestStickyipNetworks(t *testing.T) {
	dir := t.TempDir()
	subnet := writeConfFile(t, dir, "subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	writeConfFile(t, dir, "10-flannel.conflist", `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","subnetFile":"`+subnet+`","ipam":{"type":"stickyip"}}]}`)
	writeConfFile(t, dir, "20-gone.conflist", `{"name":"gone","plugins":[{"type":"flannel","subnetFile":"/nonexistent/subnet.env","ipam":{"type":"stickyip"}}]}`)
	writeConfFile(t, dir, "30-edge.conflist", `{"name":"edge","cniVersion":"1.0.0","plugins":[{"type":"macvlan","ipam":{"type":"stickyip","subnet":"192.168.5.0/24"}}]}`)
	writeConfFile(t, dir, "40-plain.conf", `{"name":"plain","type":"bridge","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}`)
	nets, problems, err := StickyipNetworks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, name := range []string{"cbr0", "edge", "gone", "plain"} {
		if n, ok := nets[name]; ok {
			got = append(got, name+" "+n.Ranges[0].String())
		}
	}
	if want := []string{"cbr0 10.244.3.1-10.244.3.254", "edge 192.168.5.1-192.168.5.254"}; !reflect.DeepEqual(got, want) {
		t.Errorf("stickyip networks %v, want %v", got, want)
	}
	if all := strings.Join(problems, "\n"); len(problems) != 1 || !strings.Contains(all, "network gone: flannel's subnet file") {
		t.Errorf("problems %q, want the network whose subnet file cannot be read", problems)
	}
	if _, _, err := StickyipNetworks(filepath.Join(dir, "[")); err == nil {
		t.Error("a directory the glob cannot read: no error")
	}
}
