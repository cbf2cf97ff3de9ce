package contract

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sample is a cache file as libcni v1.3 writes it after containerd's ADD of
// a pod to the flannel network cbr0 (fields as in libcni's cachedInfo).
const sample = `{"kind":"cniCacheV1","containerId":"5f1e0c2a","config":"eyJuYW1lIjoiY2JyMCJ9","ifName":"eth0","networkName":"cbr0",` +
	`"netns":"/var/run/netns/cni-1234","cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE","apps"],["K8S_POD_NAME","db-0"],` +
	`["K8S_POD_INFRA_CONTAINER_ID","5f1e0c2a"],["K8S_POD_UID","u-1"]],"capabilityArgs":{"io.kubernetes.cri.pod-annotations":` +
	`{"io.kubernetes.cri/reserved-ip-duration":"30","kubernetes.io/config.source":"api"},"portMappings":[]},` +
	`"result":{"cniVersion":"1.0.0","interfaces":[{"name":"cni0"},{"name":"eth0","sandbox":"/var/run/netns/cni-1234"}],` +
	`"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1","interface":1},{"address":"fd00:1::5/64","interface":1}]}}`

func TestParse(t *testing.T) {
	e, err := ParseCNICacheFile("cbr0-5f1e0c2a-eth0", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:1::5")}
	if e.Network != "cbr0" || e.ContainerID != "5f1e0c2a" || e.IfName != "eth0" || e.Netns != "/var/run/netns/cni-1234" ||
		!slices.Equal(e.IPs, want) || e.Arg("K8S_POD_NAME") != "db-0" || e.Arg("K8S_POD_UID") != "u-1" ||
		e.Annotations["io.kubernetes.cri/reserved-ip-duration"] != "30" {
		t.Fatalf("Parse = %+v", e)
	}
	old := `{"kind":"cniCacheV1","containerId":"c","ifName":"eth0","networkName":"n","result":{"cniVersion":"0.2.0","ip4":{"ip":"10.0.0.2/24"}}}`
	if e, err := ParseCNICacheFile("n-c-eth0", []byte(old)); err != nil || len(e.IPs) != 1 || e.IPs[0] != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("a 0.2.0 result: %+v %v", e, err)
	}
	for name, bad := range map[string]string{
		"cut short":        sample[:len(sample)/2],
		"another kind":     strings.Replace(sample, "cniCacheV1", "cniCacheV2", 1),
		"not its name":     strings.Replace(sample, `"ifName":"eth0"`, `"ifName":"net1"`, 1),
		"bad address":      strings.Replace(sample, "10.244.1.5/24", "10.244.1.500/24", 1),
		"address no mask":  strings.Replace(sample, "10.244.1.5/24", "10.244.1.5", 1),
		"annotations list": strings.Replace(sample, `{"io.kubernetes.cri/reserved-ip-duration":"30","kubernetes.io/config.source":"api"}`, `["x"]`, 1),
		"no result":        `{"kind":"cniCacheV1","containerId":"5f1e0c2a","ifName":"eth0","networkName":"cbr0"}`,
		"empty":            "",
	} {
		if _, err := ParseCNICacheFile("cbr0-5f1e0c2a-eth0", []byte(bad)); err == nil || !strings.Contains(err.Error(), "cbr0-5f1e0c2a-eth0") {
			t.Errorf("%s: err %v, want an error naming the file", name, err)
		}
	}
}

func TestRead(t *testing.T) {
	if got, problems, err := ReadCNICache(filepath.Join(t.TempDir(), "absent")); got != nil || problems != nil || err != nil {
		t.Fatalf("missing directory: %v %v %v", got, problems, err)
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "cbr0-5f1e0c2a-eth0"), []byte(sample), 0o600))
	must(os.WriteFile(filepath.Join(dir, "cbr0-dead-eth0"), []byte(sample[:100]), 0o600))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	got, problems, err := ReadCNICache(dir)
	if err != nil || len(got) != 1 || got[0].Written.IsZero() || len(problems) != 1 || !strings.Contains(problems[0].Error(), "cbr0-dead-eth0") {
		t.Fatalf("Read = %+v, %v, %v", got, problems, err)
	}
}

// FuzzParseCNICacheFile: any file is refused with an error, or read into an
// entry whose fields are the ones its name says, with valid addresses.
func FuzzParseCNICacheFile(f *testing.F) {
	f.Add("cbr0-5f1e0c2a-eth0", []byte(sample))
	f.Add("n-c-eth0", []byte(`{"kind":"cniCacheV1","containerId":"c","ifName":"eth0","networkName":"n","result":{"ip4":{"ip":"10.0.0.2/24"},"ip6":{"ip":"::1/128"}}}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		e, err := ParseCNICacheFile(name, data)
		if err != nil {
			return
		}
		if name != e.Network+"-"+e.ContainerID+"-"+e.IfName || e.Network == "" || e.ContainerID == "" || e.IfName == "" {
			t.Fatalf("%q read as %+v", name, e)
		}
		for _, ip := range e.IPs {
			if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" {
				t.Fatalf("invalid address %v in %+v", ip, e)
			}
		}
	})
}
