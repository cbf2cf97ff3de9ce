package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/metrics"
)

// Healther reports the last successful observation and the last error.
type Healther interface {
	Health() (time.Time, error)
}

// Handler serves /metrics and /healthz. /healthz reports the daemon's own
// health: 200 "ok" while reconcile passes can observe the node (runtime and
// disks readable) within maxAge, else 503 with the reason. An unreachable API
// server is what checkpointd exists for, and one pod's failure is that pod's
// (logged, counted, an Event): neither makes it unhealthy.
func Handler(m *metrics.Metrics, h Healther, maxAge time.Duration) http.Handler {
	start := time.Now()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		last, err := h.Health()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case !last.IsZero() && time.Since(last) <= maxAge:
			fmt.Fprintln(w, "ok")
		case last.IsZero() && err == nil && time.Since(start) <= maxAge:
			fmt.Fprintln(w, "ok: starting")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			msg := "no reconcile pass could observe the node"
			if !last.IsZero() {
				msg += " since " + last.UTC().Format(time.RFC3339)
			}
			if err != nil {
				msg += ": " + strings.ReplaceAll(err.Error(), "\n", "; ")
			}
			fmt.Fprintln(w, msg)
		}
	})
	return mux
}
