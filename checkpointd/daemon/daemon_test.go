package daemon

import (
	"path/filepath"

	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/metrics"
)

type health struct {
	last time.Time
	err  error
}

func (h health) Health() (time.Time, error) { return h.last, h.err }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func TestHealthz(t *testing.T) {
	m := metrics.New()
	cases := []struct {
		name string
		h    health
		code int
		body string
	}{
		{"recent pass", health{last: time.Now()}, 200, "ok"},
		{"starting", health{}, 200, "ok: starting"},
		{"stale pass", health{last: time.Now().Add(-time.Hour), err: errors.New("CRI ListPodSandbox: connection refused")}, 503, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, Handler(m, tc.h, time.Minute), "/healthz")
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("GET /healthz = %d %q, want %d containing %q", code, body, tc.code, tc.body)
			}
		})
	}
}

// TestDaemonSetManifest decodes deploy/checkpointd/daemonset.yaml strictly:
// it is one DaemonSet acting with the node's own identity (the kubelet's
// kubeconfig, read-only), with no service account token and no RBAC of its
// own, so it has no cluster-wide access to Secrets (issue 9 row 2).
func TestDaemonSetManifest(t *testing.T) {
	data, err := os.ReadFile("../../deploy/checkpointd/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, meta.Kind)
		if meta.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatal(err)
		}
		spec := ds.Spec.Template.Spec
		if spec.ServiceAccountName != "" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("service account %q, automount %v: want none", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
		}
		c := spec.Containers[0]
		if !slices.Contains(c.Args, "--kubeconfig=/etc/kubernetes/kubelet.conf") {
			t.Errorf("args %v: want the kubelet's kubeconfig", c.Args)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m
		}
		for _, name := range []string{"kubeconfig", "kubelet-pki"} {
			if !mounts[name].ReadOnly {
				t.Errorf("mount %s is not read-only", name)
			}
		}
		for _, v := range spec.Volumes {
			// Same path inside and outside: manifests name host paths.
			if v.HostPath == nil || mounts[v.Name].MountPath != v.HostPath.Path {
				t.Errorf("volume %s: host %v mounted at %s, want the same path", v.Name, v.HostPath, mounts[v.Name].MountPath)
			}
		}
	}
	if strings.Join(kinds, ",") != "DaemonSet" {
		t.Errorf("kinds %v: want only the DaemonSet (no ServiceAccount, no RBAC)", kinds)
	}
}

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
// them; issue 17 finding 2); with --all everything checkpointd wrote, and
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
