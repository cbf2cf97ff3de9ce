package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
	"github.com/stickyip/stickyip/checkpointd/policy"
)

// nodeConfig is the configuration of a checkpointd on node1, placement and
// store rebuilds on, that reaches the API server srv; its directories are
// the test's.
func nodeConfig(t *testing.T, srv *kubetest.Server) config.Config {
	t.Helper()
	root := t.TempDir()
	kubeconfig := filepath.Join(root, "kubeconfig")
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Config{NodeName: "node1", Kubeconfig: kubeconfig, CheckpointDir: filepath.Join(root, "checkpoints"),
		StaticPodDir: filepath.Join(root, "manifests"), VolumeDir: filepath.Join(root, "volumes"), CRIEndpoint: "unix://" + filepath.Join(root, "cri.sock"),
		DataDir: filepath.Join(root, "data"), CNIConfDir: filepath.Join(root, "net.d"), Placement: true, RebuildStore: true,
		Interval: time.Second, Timeout: time.Second, Grace: time.Minute, RestoreTimeout: time.Minute, Volumes: "copy",
		AllowNamespaces: "default", Log: slog.New(slog.DiscardHandler)}
}

// checkpointd makes one API client, for its informers, probe, Events and
// placement publisher: one set of REST clients and connections. The
// publisher's requests have a rate limit of their own, so that its writes
// do not queue behind a burst of Events: here the daemon's limit allows one
// request every 5 s, and after one request of the daemon's, the
// publisher's read of the node's NodeRecord still goes out at once.
func TestOneAPIClient(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node1-uid"}}
	srv := kubetest.New(t, node, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}})
	slow := func(kubeconfig string, timeout time.Duration) (*rest.Config, error) {
		rc, err := config.RestConfig(kubeconfig, timeout)
		if rc != nil {
			rc.QPS, rc.Burst = 0.2, 1
		}
		return rc, err
	}
	was := restConfig
	restConfig = slow
	t.Cleanup(func() { restConfig = was })
	pol, err := policy.Parse("default", "")
	if err != nil {
		t.Fatal(err)
	}
	before := kube.Built()
	p, err := build(nodeConfig(t, srv), pol)
	if err != nil {
		t.Fatal(err)
	}
	defer p.runtime.Close()
	if p.pub == nil || p.records == nil {
		t.Fatal("no placement publisher built")
	}
	if n := kube.Built() - before; n != 1 {
		t.Errorf("checkpointd made %d API clients, want 1", n)
	}

	if _, err := p.api.ConfigMap(context.Background(), "default", "settings"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := p.records.Get(ctx); err != nil {
		t.Fatalf("the publisher's read after a request of the daemon's: %v; want it sent at once", err)
	}
	if _, err := p.api.ConfigMap(ctx, "default", "settings"); err == nil {
		t.Fatal("the daemon's limit let a second request through at once: the test shows nothing")
	}
}
