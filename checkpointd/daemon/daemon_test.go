package daemon

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
}
