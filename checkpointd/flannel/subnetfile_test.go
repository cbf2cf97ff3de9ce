package flannel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
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
// IPAM; a file no plugin reads gives none.
func TestNetworks(t *testing.T) {
	confDir := t.TempDir()
	subnetEnv := filepath.Join(t.TempDir(), "subnet.env")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "stickyip")
	write(filepath.Join(confDir, "10-flannel.conflist"), `{"cniVersion":"0.3.1","name":"cbr0","plugins":[
	  {"type":"flannel","subnetFile":"`+subnetEnv+`","ipam":{"type":"stickyip","dataDir":"`+dir+`"},"delegate":{"isDefaultGateway":true}},
	  {"type":"portmap","capabilities":{"portMappings":true}}]}`)
	write(subnetEnv, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	write(filepath.Join(confDir, "20-bridge.conflist"), `{"cniVersion":"1.0.0","name":"br","plugins":[
	  {"type":"bridge","ipam":{"type":"stickyip","dataDir":"`+dir+`","ranges":[[{"subnet":"10.99.0.0/24","rangeStart":"10.99.0.10","rangeEnd":"10.99.0.19"}]]}}]}`)
	write(filepath.Join(confDir, "30-other.conf"), `{"cniVersion":"1.0.0","name":"other","type":"bridge","ipam":{"type":"host-local","subnet":"10.98.0.0/24"}}`)
	write(filepath.Join(confDir, "40-broken.conflist"), `{not json`)
	c, err := ipam.ReadConf(confDir)
	if err != nil {
		t.Fatal(err)
	}
	if nets := Networks(c, subnetEnv); len(nets) != 1 || nets[0] != "cbr0" {
		t.Errorf("Networks = %v; want [cbr0]", nets)
	}
	if nets := Networks(c, contract.DefaultFlannelSubnetFile); len(nets) != 0 {
		t.Errorf("Networks of another subnet file = %v, want none", nets)
	}
	if nets := Networks(nil, subnetEnv); nets != nil {
		t.Errorf("Networks without a directory read = %v, want none", nets)
	}
}
