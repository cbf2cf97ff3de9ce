package ipam

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/contract"
)

// writeCached writes a CNI result cache file as libcni does after an ADD of
// network conf (the whole config, as bytes) for sandbox cid.
func writeCached(t *testing.T, dir, network, cid, conf string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": cid, "config": []byte(conf), "ifName": "eth0", "networkName": network,
		"netns":  "/var/run/netns/x",
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": "10.244.1.7/24"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, network+"-"+cid+"-eth0"), body, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The runtime's CNI result cache tells a data directory removed whole from
// a new one: only a cached ADD through stickyip with that very data
// directory counts, whatever the chain (flannel's, a plain bridge, a single
// config) and whether the directory is written or the default.
func TestCacheWitness(t *testing.T) {
	const dataDir = "/var/lib/stickyip-test"
	flannel := `{"name":"cbr0","cniVersion":"1.0.0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true},` +
		`"ipam":{"type":"stickyip","dataDir":"` + dataDir + `/"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	cases := []struct {
		name    string
		cached  map[string]string // container ID → config
		dataDir string
		want    string // a substring of the answer; "" for none
	}{
		{"no cache directory", nil, dataDir, ""},
		{"flannel's chain through stickyip, dataDir with a trailing slash", map[string]string{"c1": flannel}, dataDir, "c1"},
		{"a bridge config of one plugin, the default data directory",
			map[string]string{"c2": `{"name":"br","type":"bridge","ipam":{"type":"stickyip"}}`}, contract.DefaultDataDir, "c2"},
		{"the same ADD, another data directory", map[string]string{"c1": flannel}, "/var/lib/other", ""},
		{"host-local's ADDs (a node just switched to stickyip)",
			map[string]string{"c3": `{"name":"cbr0","plugins":[{"type":"flannel","ipam":{"type":"host-local","dataDir":"` + dataDir + `"}}]}`}, dataDir, ""},
		{"a config that does not parse", map[string]string{"c4": `{"name":`}, dataDir, ""},
		{"a config with no name", map[string]string{"c5": `{"type":"bridge","ipam":{"type":"stickyip","dataDir":"` + dataDir + `"}}`}, dataDir, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "results")
			for cid, conf := range tc.cached {
				writeCached(t, dir, "cbr0", cid, conf)
			}
			got, err := CacheWitness(dir, tc.dataDir)()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("witness %q, want none", got)
			case tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "10.244.1.7")):
				t.Fatalf("witness %q, want one naming sandbox %s and its address", got, tc.want)
			}
		})
	}
}

// A cache that cannot be listed leaves the answer unknown: an error, never
// "a new node".
func TestCacheWitnessUnreadable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "results")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := CacheWitness(file, "/var/lib/x")(); err == nil {
		t.Fatalf("a cache that is not a directory: %q, nil; want an error", got)
	}
}
