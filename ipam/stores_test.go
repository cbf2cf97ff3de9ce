package ipam

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
