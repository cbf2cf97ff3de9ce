package flannel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
)

// The lease checkpointd keeps is the file the flannel
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
	auto := SubnetFileFromCNI
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

// The networks a lease gives addresses to are those whose flannel plugin
// reads its file (the plugin's default when it names none), whatever their
// IPAM, and whether the file exists or not; a file no plugin reads gives
// none.
func TestNetworks(t *testing.T) {
	confDir := t.TempDir()
	for name, plugins := range map[string]string{
		"cbr0":    `{"type":"flannel","subnetFile":"/run/flannel/other.env","ipam":{"type":"stickyip"}},{"type":"portmap"}`,
		"default": `{"type":"flannel","delegate":{"hairpinMode":true}}`,
		"br":      `{"type":"bridge","ipam":{"type":"host-local","subnet":"10.98.0.0/24"}}`,
	} {
		conf := `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[` + plugins + `]}`
		if err := os.WriteFile(filepath.Join(confDir, name+".conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := ipam.ReadConf(confDir)
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"/run/flannel/other.env":            "cbr0",
		"/run/flannel/../flannel/other.env": "cbr0",
		contract.DefaultFlannelSubnetFile:   "default",
		"/run/flannel/none.env":             "",
	} {
		if got := strings.Join(Networks(c, file), ","); got != want {
			t.Errorf("Networks(%s) = [%s], want [%s]", file, got, want)
		}
	}
	if nets := Networks(nil, contract.DefaultFlannelSubnetFile); nets != nil {
		t.Errorf("Networks without a directory read = %v, want none", nets)
	}
}
