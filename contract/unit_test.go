package contract

import (
	"maps"
	"os"
	"strings"
	"testing"
)

// TestSystemdUnitDefaults: the shipped unit sets checkpointd's settings to
// the defaults defined here (the binary's flag defaults), and lets it write
// below each directory it writes to.
func TestSystemdUnitDefaults(t *testing.T) {
	data, err := os.ReadFile("../conf/checkpointd.service")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var writable []string
	for _, line := range strings.Split(string(data), "\n") {
		if kv, ok := strings.CutPrefix(line, "Environment=CHECKPOINTD_"); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if paths, ok := strings.CutPrefix(line, "ReadWritePaths="); ok {
			writable = append(writable, strings.Fields(paths)...)
		}
	}
	want := map[string]string{
		"KUBECONFIG":     DefaultKubeconfig,
		"STATIC_POD_DIR": DefaultStaticPodDir,
		"CHECKPOINT_DIR": DefaultCheckpointDir,
		"VOLUME_DIR":     DefaultVolumeDir,
		"DATA_DIR":       DefaultDataDir,
		"LISTEN_ADDRESS": DefaultListenAddress,
	}
	if !maps.Equal(env, want) {
		t.Errorf("unit's CHECKPOINTD_* settings:\n got %v\nwant %v", env, want)
	}
	for _, dir := range []string{DefaultStaticPodDir, DefaultCheckpointDir, DefaultVolumeDir, DefaultDataDir} {
		ok := false
		for _, w := range writable {
			ok = ok || dir == w || strings.HasPrefix(dir, strings.TrimSuffix(w, "/")+"/")
		}
		if !ok {
			t.Errorf("%s is below none of the unit's ReadWritePaths %v", dir, writable)
		}
	}
}

// TestDaemonSetDefaults: checkpointd's DaemonSet passes the defaults defined
// here for every setting it names with a path or address.
func TestDaemonSetDefaults(t *testing.T) {
	data, err := os.ReadFile("../deploy/checkpointd/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if kv, ok := strings.CutPrefix(strings.TrimSpace(line), "- --"); ok {
			k, v, _ := strings.Cut(kv, "=")
			args[k] = strings.TrimSpace(v)
		}
	}
	want := map[string]string{
		"kubeconfig":     DefaultKubeconfig,
		"static-pod-dir": DefaultStaticPodDir,
		"checkpoint-dir": DefaultCheckpointDir,
		"volume-dir":     DefaultVolumeDir,
		"data-dir":       DefaultDataDir,
		"cni-conf-dir":   DefaultCNIConfDir,
		"listen-address": DefaultListenAddress,
	}
	for k, v := range want {
		if args[k] != v {
			t.Errorf("daemonset.yaml --%s=%q, want the default %q", k, args[k], v)
		}
	}
}
