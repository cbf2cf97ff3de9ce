package harness

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// CapPodAnnotations is the CNI capability that carries pod annotations.
const CapPodAnnotations = "io.kubernetes.cri.pod-annotations"

// IPAM returns an "ipam" block of the given type (stickyip, host-local) with
// dataDir and one range set per element of sets (each a list of subnets).
// Callers add their own keys (logFile, lockTimeout, reservation, ...).
func IPAM(kind, dataDir string, sets ...[]string) map[string]any {
	var rs []any
	for _, set := range sets {
		var r []any
		for _, subnet := range set {
			r = append(r, map[string]any{"subnet": subnet})
		}
		rs = append(rs, r)
	}
	return map[string]any{"type": kind, "dataDir": dataDir, "ranges": rs}
}

// NetConf returns a network configuration as the bridge plugin passes it to
// its IPAM plugin: cniVersion, name, type bridge and the ipam block. It is a
// map so that tests can break it on purpose; Encode renders it.
func NetConf(cniVersion, network string, ipam map[string]any) map[string]any {
	return map[string]any{"cniVersion": cniVersion, "name": network, "type": "bridge", "ipam": ipam}
}

// IPAMOf returns the ipam block of conf, for tests that change it.
func IPAMOf(conf map[string]any) map[string]any { return conf["ipam"].(map[string]any) }

// WithAnnotations returns a copy of conf whose runtimeConfig carries the pod
// annotations, as containerd and CRI-O pass them (nil: no runtimeConfig).
func WithAnnotations(conf map[string]any, annotations map[string]string) map[string]any {
	out := maps.Clone(conf)
	if annotations != nil {
		out["runtimeConfig"] = map[string]any{CapPodAnnotations: annotations}
	}
	return out
}

// WithValidAttachments returns a copy of conf for a CNI GC call that keeps
// the given (containerID, ifname) attachments.
func WithValidAttachments(conf map[string]any, attachments [][2]string) map[string]any {
	out := maps.Clone(conf)
	list := []map[string]string{}
	for _, a := range attachments {
		list = append(list, map[string]string{"containerID": a[0], "ifname": a[1]})
	}
	out["cni.dev/valid-attachments"] = list
	return out
}

// Encode renders conf as JSON (maps of JSON values cannot fail to encode).
func Encode(conf map[string]any) []byte {
	b, err := json.Marshal(conf)
	if err != nil {
		panic("harness: network config does not encode: " + err.Error())
	}
	return b
}

// PodCNIArgs is CNI_ARGS as containerd sets it for a pod sandbox.
func PodCNIArgs(namespace, name, uid, containerID string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + namespace + ";K8S_POD_NAME=" + name +
		";K8S_POD_INFRA_CONTAINER_ID=" + containerID + ";K8S_POD_UID=" + uid
}

// ShippedConfig returns conf/<name>, a CNI configuration the project ships,
// so that tests run what users install. It fails t if the file is missing.
func ShippedConfig(t testing.TB, name string) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "conf", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// ShippedConflist returns conf/<name> decoded, for a test to move its paths.
func ShippedConflist(t testing.TB, name string) map[string]any {
	t.Helper()
	var conflist map[string]any
	if err := json.Unmarshal(ShippedConfig(t, name), &conflist); err != nil {
		t.Fatalf("conf/%s: %v", name, err)
	}
	return conflist
}
