package daemon

import (
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
// own, so it has no cluster-wide access to Secrets.
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
