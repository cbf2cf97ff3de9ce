package admin

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// twoStores makes a CNI config dir with two stickyip networks keeping
// their records in two stores (cbr0, a flannel network whose subnet file
// does not exist; edge, a bridge network with its own dataDir), and one
// host-local network, and records one reservation per store.
func twoStores(t *testing.T) (confDir, cbr0Dir, edgeDir string) {
	t.Helper()
	confDir, cbr0Dir, edgeDir = t.TempDir(), t.TempDir(), t.TempDir()
	confs := map[string]string{
		"10-flannel.conflist": `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","subnetFile":"/nonexistent/subnet.env",
			"ipam":{"type":"stickyip","dataDir":"` + cbr0Dir + `"}},{"type":"portmap"}]}`,
		"20-edge.conflist": `{"name":"edge","cniVersion":"1.0.0","plugins":[{"type":"bridge",
			"ipam":{"type":"stickyip","subnet":"192.168.5.0/24","dataDir":"` + edgeDir + `","hostLocalDataDir":""}}]}`,
		"30-plain.conf": `{"name":"plain","type":"bridge","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}}`,
	}
	for name, body := range confs {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reserve(t, cbr0Dir, "cbr0", "10.244.1.5", "default", "db-0")
	reserve(t, edgeDir, "edge", "192.168.5.9", "edge", "camera")
	return confDir, cbr0Dir, edgeDir
}

func reserve(t *testing.T, dir, network, ip, ns, name string) {
	t.Helper()
	err := boltstore.New(dir, 0).Update(network, func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Reserved,
			Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, Duration: time.Hour, ExpiresAt: time.Now().Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoresFromTheConflist: with no --data-dir, every command works on the
// stores the CNI configuration names, each named (list's table and JSON,
// release, gc, check), and --data-dir still wins.
func TestStoresFromTheConflist(t *testing.T) {
	confDir, cbr0Dir, edgeDir := twoStores(t)
	t.Setenv("STICKYIP_DATA_DIR", "")

	out, errOut, code := run(t, "list", "--cni-conf-dir", confDir, "--json")
	var entries []Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || code != 0 || len(entries) != 2 {
		t.Fatalf("list --json: %d %v\n%s%s", code, err, out, errOut)
	}
	got := map[string]string{}
	for _, e := range entries {
		got[e.Network] = e.DataDir + " " + e.IP
	}
	if got["cbr0"] != cbr0Dir+" 10.244.1.5" || got["edge"] != edgeDir+" 192.168.5.9" {
		t.Errorf("list --json: %v; want each network from its own store", got)
	}
	table, _, _ := run(t, "--cni-conf-dir", confDir, "list")
	for _, want := range []string{cbr0Dir + " (cbr0: " + filepath.Join(confDir, "10-flannel.conflist") + ")",
		edgeDir + " (edge: " + filepath.Join(confDir, "20-edge.conflist") + ")", "default/db-0", "edge/camera"} {
		if !strings.Contains(table, want) {
			t.Errorf("list table lacks %q:\n%s", want, table)
		}
	}
	if out, _, _ := run(t, "--cni-conf-dir", confDir, "list", "--network", "edge", "--json"); strings.Contains(out, "10.244.1.5") || !strings.Contains(out, "192.168.5.9") {
		t.Errorf("list --network edge:\n%s", out)
	}

	// --data-dir wins, as a flag or from the environment.
	if out, _, _ := run(t, "--cni-conf-dir", confDir, "--data-dir", edgeDir, "list", "--json"); strings.Contains(out, "10.244.1.5") || !strings.Contains(out, "192.168.5.9") {
		t.Errorf("list --data-dir %s:\n%s", edgeDir, out)
	}
	t.Setenv("STICKYIP_DATA_DIR", cbr0Dir)
	if out, _, _ := run(t, "--cni-conf-dir", confDir, "list", "--json"); !strings.Contains(out, "10.244.1.5") || strings.Contains(out, "192.168.5.9") {
		t.Errorf("list with STICKYIP_DATA_DIR=%s:\n%s", cbr0Dir, out)
	}
	t.Setenv("STICKYIP_DATA_DIR", "")

	out, _, code = run(t, "check", "--cni-conf-dir", confDir, "--json")
	var checks []CheckResult
	if err := json.Unmarshal([]byte(out), &checks); err != nil || code != 0 || len(checks) != 2 ||
		checks[0].Path != filepath.Join(cbr0Dir, boltstore.DBFile) || checks[1].Path != filepath.Join(edgeDir, boltstore.DBFile) {
		t.Errorf("check --json: %d %v\n%s", code, err, out)
	}
	out, errOut, code = run(t, "gc", "--cni-conf-dir", confDir)
	// cbr0's ranges come from flannel's subnet file, absent here: skipped, named.
	if code != 0 || !strings.Contains(out, "edge ("+edgeDir+"): released 0") || !strings.Contains(errOut, "cbr0 ("+cbr0Dir+"): skipped") {
		t.Errorf("gc: %d\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, "release", "edge/camera", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(out, "edge ("+edgeDir+"): released 192.168.5.9") {
		t.Errorf("release edge/camera: %d %s", code, out)
	}
	if st := listed(t, cbr0Dir, "10.244.1.5"); st.State != "reserved" {
		t.Errorf("the other store's reservation after release: %+v", st)
	}
}

// TestNoStickyipNetwork: a conflist switched back to host-local (the store
// stays): the default store is read, and stderr says why.
func TestNoStickyipNetwork(t *testing.T) {
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-flannel.conflist"),
		[]byte(`{"name":"cbr0","plugins":[{"type":"flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STICKYIP_DATA_DIR", "")
	def := t.TempDir()
	defaultDataDir = def
	t.Cleanup(func() { defaultDataDir = contract.DefaultDataDir })
	reserve(t, def, "cbr0", "10.244.1.5", "default", "db-0")
	out, errOut, code := run(t, "list", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(errOut, "no network in "+confDir+" uses stickyip") || !strings.Contains(errOut, def) || !strings.Contains(out, "default/db-0") {
		t.Errorf("list with no stickyip network: %d %s, stderr %q", code, out, errOut)
	}
}

// TestImportFollowsTheConflist: import goes into the network's store, from
// the host-local directory its config names; a config with the import off
// needs --from.
func TestImportFollowsTheConflist(t *testing.T) {
	confDir, dataDir, hl := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(hl, "cbr0"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(hl, "cbr0", "10.5.0.7"), []byte("cid-7\r\neth0"), 0o600)
	write := func(hostLocal string) {
		conf := `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","subnet":"10.5.0.0/24","dataDir":"` +
			dataDir + `","hostLocalDataDir":"` + hostLocal + `"}}]}`
		if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("STICKYIP_DATA_DIR", "")
	write("")
	if _, errOut, code := run(t, "import", "--network", "cbr0", "--cni-conf-dir", confDir); code != 2 || !strings.Contains(errOut, "--from") {
		t.Errorf("import with the config's import off: %d %s", code, errOut)
	}
	write(hl)
	out, errOut, code := run(t, "import", "--network", "cbr0", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(out, "imported 1 allocations from "+filepath.Join(hl, "cbr0")+" into "+dataDir) {
		t.Fatalf("import: %d %s%s", code, out, errOut)
	}
	if e := listed(t, dataDir, "10.5.0.7"); e.State != "allocated" || !e.Imported {
		t.Errorf("imported record: %+v", e)
	}
}
