package ipamstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The store with a reservation and a sticky pod in cbr0: while the conflist
// names stickyip with this data directory nothing is reported; once it is
// kube-flannel's own (host-local), cbr0 is, with its counts; without a CNI
// config dir, nothing is compared.
func TestUnconfigured(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	seed(t, dir, rec("10.244.1.2", "reserved", "", "db", "db-0", time.Hour), rec("10.244.1.3", "allocated", "c3", "db", "db-1", time.Hour),
		rec("10.244.1.4", "allocated", "c4", "default", "web", 0))
	confDir := t.TempDir()
	write := func(conf string) {
		if err := os.WriteFile(filepath.Join(confDir, "10-flannel.conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(dir).WithCNIConfDir(confDir)
	write(`{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","ipam":{"type":"stickyip","dataDir":"` + dir + `"}}]}`)
	if got, err := s.Unconfigured(); err != nil || len(got) != 0 {
		t.Fatalf("conflist naming stickyip here: %+v %v", got, err)
	}
	write(`{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap"}]}`)
	got, err := s.Unconfigured()
	if err != nil || len(got) != 1 || got[0].Network != "cbr0" || got[0].Reserved != 1 || got[0].Sticky != 1 || !strings.Contains(got[0].Now, "host-local") {
		t.Fatalf("conflist switched back to host-local: %+v %v", got, err)
	}
	if got, err := newStore(dir).Unconfigured(); err != nil || got != nil {
		t.Fatalf("no CNI config dir: %+v %v", got, err)
	}
}
