package manager

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /healthz (the process answers), /readyz (the caches are
// synced; the leader has also done its first full index sync) and
// /metrics.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, why := m.Ready()
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// Ready reports whether the replica is ready, and says why (not). One that
// writes without an election leads from the start.
func (m *Manager) Ready() (bool, string) {
	switch {
	case !m.synced.Load():
		return false, "caches not synced"
	case (m.leading.Load() || !m.cfg.LeaderElect) && !m.firstSynced.Load():
		return false, "leading: first index sync not done"
	case m.leading.Load():
		return true, "ok: leading"
	}
	return true, "ok: following"
}
