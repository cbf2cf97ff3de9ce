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
