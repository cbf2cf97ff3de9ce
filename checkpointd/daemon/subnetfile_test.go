package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/contract"
)

// Issue 17 finding 7: the lease checkpointd keeps is the file the flannel
// plugin reads (its conflist's subnetFile), not a second setting that can
// disagree with it; the flag overrides it.
func TestSubnetFileFromTheFlannelConflist(t *testing.T) {
	conf := func(files ...string) string {
		dir := t.TempDir()
		for i, f := range files {
			field := ""
			if f != "" {
				field = `"subnetFile":"` + f + `",`
			}
			body := `{"cniVersion":"1.0.0","name":"net` + string(rune('a'+i)) + `","plugins":[{"type":"flannel",` + field +
				`"ipam":{"type":"stickyip"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
			if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))+".conflist"), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	auto := flannel.SubnetFileFromCNI
	for _, c := range []struct {
		name, flag, confDir, want, err string
	}{
		{"named by the conflist", auto, conf("/run/flannel/other.env"), "/run/flannel/other.env", ""},
		{"the plugin's default", auto, conf(""), contract.DefaultFlannelSubnetFile, ""},
		{"two networks, one file", auto, conf("/run/f.env", "/run/f.env"), "/run/f.env", ""},
		{"no flannel network: none kept", auto, conf(), "", ""},
		{"the flag overrides", "/srv/lease.env", conf("/run/flannel/other.env"), "/srv/lease.env", ""},
		{"disabled", "", conf("/run/flannel/other.env"), "", ""},
		{"two files", auto, conf("/run/a.env", "/run/b.env"), "", "different subnet files"},
		{"no conf dir", auto, "", "", "needs --cni-conf-dir"},
	} {
		got, err := SubnetFile(c.flag, c.confDir)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: SubnetFile = %q, %v; want %q, error containing %q", c.name, got, err, c.want, c.err)
		}
	}
}
