package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
	"github.com/stickyip/stickyip/checkpointd/policy"
)

// checkpointd makes one API client, for its informers, probe, Events and
// placement publisher (the publisher made a second one, with its own
// connections, rate limit and memory).
func TestOneAPIClient(t *testing.T) {
	srv := kubetest.New(t)
	root := t.TempDir()
	kubeconfig := filepath.Join(root, "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{NodeName: "node1", Kubeconfig: kubeconfig, CheckpointDir: filepath.Join(root, "checkpoints"),
		StaticPodDir: filepath.Join(root, "manifests"), VolumeDir: filepath.Join(root, "volumes"), CRIEndpoint: "unix://" + filepath.Join(root, "cri.sock"),
		DataDir: filepath.Join(root, "data"), CNIConfDir: filepath.Join(root, "net.d"), Placement: true, RebuildStore: true,
		Interval: time.Second, Timeout: time.Second, Log: slog.New(slog.DiscardHandler)}
	pol, err := policy.Parse("default", "")
	if err != nil {
		t.Fatal(err)
	}
	before := kube.Built()
	p, err := build(cfg, pol)
	if err != nil {
		t.Fatal(err)
	}
	defer p.runtime.Close()
	if p.pub == nil {
		t.Fatal("no placement publisher built")
	}
	if n := kube.Built() - before; n != 1 {
		t.Errorf("checkpointd made %d API clients, want 1", n)
	}
}
