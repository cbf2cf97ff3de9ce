package daemon

import (
	"github.com/stickyip/stickyip/contract"

	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

func TestMetricsEndpoint(t *testing.T) {
	m := metrics.New()
	m.Checkpoints.Set(3)
	m.Reservations.WithLabelValues("cbr0").Set(2)
	code, body := get(t, Handler(m, health{last: time.Now()}, time.Minute), "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{"checkpointd_checkpoints 3", `checkpointd_ipam_reservations{network="cbr0"} 2`,
		"checkpointd_restores_active", "checkpointd_ipam_reconciled_leaks_total", "checkpointd_api_reachable"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Config{NodeName: "n", CheckpointDir: "/c", StaticPodDir: "/s", VolumeDir: "/v", Grace: time.Minute,
		Interval: time.Second, Volumes: "copy", Reservation: "10m"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"--node-name":           func(c *Config) { c.NodeName = "" },
		"--grace-period":        func(c *Config) { c.Grace = 0 },
		"--volumes":             func(c *Config) { c.Volumes = "maybe" },
		"--restore-reservation": func(c *Config) { c.Reservation = "soon" },
		"--static-pod-dir":      func(c *Config) { c.StaticPodDir = "" },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming the flag", name, err)
		}
	}
	c := good
	c.Reservation = "30"
	if err := c.Validate(); err != nil {
		t.Errorf("integer minutes rejected: %v", err)
	}
	// Issue 9 row 11: checkpointd accepted values the plugin refuses, so the
	// restored copy never got a network. Every value the plugin's parser
	// refuses must be refused here, naming the flag.
	for _, v := range []string{"-5m", "-5", "1e309", "1.5", " ", strings.Repeat("9", 65)} {
		c.Reservation = v
		_, perr := contract.ParseReservedDuration(v)
		err := c.Validate()
		if perr == nil || err == nil || !strings.Contains(err.Error(), "--restore-reservation") {
			t.Errorf("--restore-reservation=%q: Validate err %v (plugin parser: %v); want both to refuse it", v, err, perr)
		}
	}
}

// TestDaemonSetManifest decodes conf/checkpointd-daemonset.yaml strictly and
// checks that its RBAC is the least the daemon needs.
func TestDaemonSetManifest(t *testing.T) {
	data, err := os.ReadFile("../../conf/checkpointd-daemonset.yaml")
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
		switch meta.Kind {
		case "ClusterRole":
			var cr rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &cr); err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range cr.Rules {
				for _, res := range r.Resources {
					got[res] = strings.Join(r.Verbs, ",")
				}
				if len(r.APIGroups) != 1 || r.APIGroups[0] != "" || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
					t.Errorf("unexpected rule %+v", r)
				}
			}
			want := map[string]string{"pods": "get,list,watch", "secrets": "get", "configmaps": "get"}
			if len(got) != len(want) {
				t.Errorf("RBAC grants %v, want exactly %v", got, want)
			}
			for res, verbs := range want {
				if got[res] != verbs {
					t.Errorf("RBAC on %s: %q, want %q", res, got[res], verbs)
				}
			}
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			c := ds.Spec.Template.Spec.Containers[0]
			mounts := map[string]string{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m.MountPath
			}
			for _, v := range ds.Spec.Template.Spec.Volumes {
				// Same path inside and outside: manifests name host paths.
				if v.HostPath == nil || mounts[v.Name] != v.HostPath.Path {
					t.Errorf("volume %s: host %v mounted at %s, want the same path", v.Name, v.HostPath, mounts[v.Name])
				}
			}
		case "ServiceAccount", "ClusterRoleBinding":
		default:
			t.Errorf("unexpected kind %q", meta.Kind)
		}
	}
	if strings.Join(kinds, ",") != "ServiceAccount,ClusterRole,ClusterRoleBinding,DaemonSet" {
		t.Errorf("kinds %v", kinds)
	}
}
