package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/checkpointd/config"
)

// TestUnitRemovesCopiesWhenItStops: the shipped unit runs `checkpointd
// cleanup` after every stop, with the same settings as the daemon.
func TestUnitRemovesCopiesWhenItStops(t *testing.T) {
	data, err := os.ReadFile("../../conf/checkpointd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{"\nExecStart=/usr/local/bin/checkpointd\n", "\nExecStopPost=/usr/local/bin/checkpointd cleanup\n",
		"\nEnvironmentFile=-/etc/default/checkpointd\n", "\nEnvironment=CHECKPOINTD_STATIC_POD_DIR=", "\nEnvironment=CHECKPOINTD_VOLUME_DIR="} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", strings.TrimSpace(want))
		}
	}
	if strings.Index(unit, "EnvironmentFile=") < strings.LastIndex(unit, "Environment=CHECKPOINTD_") {
		t.Error("EnvironmentFile must come after the defaults so the operator's settings win")
	}
}

// TestCleanup: `checkpointd cleanup` removes the copies' manifests and keeps
// their files (a copy the kubelet keeps running during an outage still reads
// them); with --all everything checkpointd wrote, and
// never a file it did not write.
func TestCleanup(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Config{StaticPodDir: filepath.Join(dir, "manifests"), CheckpointDir: filepath.Join(dir, "ckpt"),
		VolumeDir: filepath.Join(dir, "run")}
	files := map[string]string{
		"manifests/stickyip-checkpoint-default_web.yaml": "copy (legacy name)",
		"manifests/stickyip-checkpoint-default_api.json": "copy",
		"manifests/kube-apiserver.yaml":                  "not ours",
		"run/default_web/tls/key":                        "secret",
		"run/boot.json":                                  "{}",
		"ckpt/default_web.ckpt":                          "record",
		"ckpt/default_gone.absent":                       "mark",
		"ckpt/flannel-subnet.env":                        "lease",
		"ckpt/api-contact":                               "2026-01-02T03:04:05Z\n",
		"ckpt/corrupt/default_x.ckpt.123":                "evidence",
		"ckpt/operator-notes":                            "not ours",
	}
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(dir, p)); return err == nil }
	if _, err := Cleanup(cfg, false); err != nil {
		t.Fatal(err)
	}
	if exists("manifests/stickyip-checkpoint-default_web.yaml") || exists("manifests/stickyip-checkpoint-default_api.json") ||
		!exists("run/default_web/tls/key") || !exists("ckpt/default_web.ckpt") || !exists("run/boot.json") || !exists("ckpt/api-contact") {
		t.Fatal("cleanup without --all: want the copies' manifests gone; their files, checkpoints, API contact and boot state kept")
	}
	if _, err := Cleanup(cfg, true); err != nil {
		t.Fatal(err)
	}
	for p := range files {
		ours := !strings.Contains(files[p], "not ours")
		if exists(p) == ours {
			t.Errorf("%s: exists=%t after cleanup --all (ours=%t)", p, exists(p), ours)
		}
	}
}
