package daemon

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/placement"
)

// pageFamilies are the metric families of checkpointd's /metrics and their
// types (dashboards, alerts and the bench read these names): the 69
// families written by checkpointd's own text writer, and the
// Prometheus client's process_network_* it serves again now.
// checkpointd_placement_errors_total appears with its first failure.
var pageFamilies = map[string]string{
	"checkpointd_api_reachable": "gauge", "checkpointd_checkpoint_saves_total": "counter", "checkpointd_checkpoints": "gauge",
	"checkpointd_checkpoints_corrupt_total": "counter", "checkpointd_copies_removed_total": "counter", "checkpointd_flannel_lease_errors_total": "counter",
	"checkpointd_flannel_lease_restores_total": "counter", "checkpointd_handbacks_total": "counter", "checkpointd_ipam_allocations": "gauge",
	"checkpointd_ipam_cooling_ips": "gauge", "checkpointd_ipam_free_ips": "gauge", "checkpointd_ipam_reconciled_leaks_total": "counter",
	"checkpointd_ipam_reservations": "gauge", "checkpointd_ipam_store_damaged": "gauge", "checkpointd_ipam_store_rebuild_seconds": "gauge",
	"checkpointd_ipam_store_rebuild_unplaced_total": "counter", "checkpointd_ipam_store_rebuild_waiting": "gauge", "checkpointd_ipam_store_rebuilds_total": "counter",
	"checkpointd_ipam_store_reclaims_total": "counter", "checkpointd_ipam_store_reclaim_seconds": "gauge", "checkpointd_ipam_store_reclaim_waiting": "gauge",
	"checkpointd_ipam_unconfigured_sticky_ips": "gauge", "checkpointd_last_reconcile_timestamp_seconds": "gauge", "checkpointd_node_pod_cidr_changes_total": "counter",
	"checkpointd_placement_records": "gauge", "checkpointd_placement_superseded": "gauge",
	"checkpointd_placement_writes_total": "counter", "checkpointd_pod_errors_total": "counter", "checkpointd_reconcile_errors_total": "counter", "checkpointd_reconcile_passes_total": "counter",
	"checkpointd_refusals_total": "counter", "checkpointd_releases_total": "counter", "checkpointd_restore_failures_total": "counter",
	"checkpointd_restore_seconds": "histogram", "checkpointd_restores_active": "gauge", "checkpointd_restores_total": "counter",
	"go_gc_duration_seconds": "summary", "go_gc_gogc_percent": "gauge", "go_gc_gomemlimit_bytes": "gauge",
	"go_goroutines": "gauge", "go_info": "gauge", "go_memstats_alloc_bytes": "gauge",
	"go_memstats_alloc_bytes_total": "counter", "go_memstats_buck_hash_sys_bytes": "gauge", "go_memstats_frees_total": "counter",
	"go_memstats_gc_sys_bytes": "gauge", "go_memstats_heap_alloc_bytes": "gauge", "go_memstats_heap_idle_bytes": "gauge",
	"go_memstats_heap_inuse_bytes": "gauge", "go_memstats_heap_objects": "gauge", "go_memstats_heap_released_bytes": "gauge",
	"go_memstats_heap_sys_bytes": "gauge", "go_memstats_last_gc_time_seconds": "gauge", "go_memstats_mallocs_total": "counter",
	"go_memstats_mcache_inuse_bytes": "gauge", "go_memstats_mcache_sys_bytes": "gauge", "go_memstats_mspan_inuse_bytes": "gauge",
	"go_memstats_mspan_sys_bytes": "gauge", "go_memstats_next_gc_bytes": "gauge", "go_memstats_other_sys_bytes": "gauge",
	"go_memstats_stack_inuse_bytes": "gauge", "go_memstats_stack_sys_bytes": "gauge", "go_memstats_sys_bytes": "gauge",
	"go_sched_gomaxprocs_threads": "gauge", "go_threads": "gauge", "process_cpu_seconds_total": "counter",
	"process_max_fds": "gauge", "process_open_fds": "gauge", "process_resident_memory_bytes": "gauge",
	"process_network_receive_bytes_total": "counter", "process_network_transmit_bytes_total": "counter",
	"process_start_time_seconds": "gauge", "process_virtual_memory_bytes": "gauge", "process_virtual_memory_max_bytes": "gauge",
}

// A scrape of the daemon's HTTP server finds every metric checkpointd
// exports, with its type, in a page Prometheus parses, and the values set.
func TestMetricsPage(t *testing.T) {
	m := metrics.New()
	placement.New(nil, placement.Options{Node: "n", Registry: m.Registry, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	m.Checkpoints.Set(3)
	m.RestoreSeconds.Observe(3)
	for _, v := range []*prometheus.CounterVec{m.Refusals, m.RestoreFailures, m.CopiesRemoved, m.PodErrors} {
		v.WithLabelValues("x").Inc()
	}
	for i, v := range []*prometheus.GaugeVec{m.Allocations, m.Reservations, m.Cooling, m.FreeIPs, m.UnconfiguredSticky} {
		v.WithLabelValues("cbr0").Set(float64(i))
	}
	srv := httptest.NewServer(Handler(m, health{last: time.Now()}, time.Minute))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/plain; version=0.0.4; charset=utf-8") {
		t.Fatalf("GET /metrics = %d, Content-Type %q", resp.StatusCode, ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("Prometheus cannot parse /metrics: %v", err)
	}
	var missing, extra []string
	for name, typ := range pageFamilies {
		if f := fams[name]; f == nil || strings.ToLower(f.GetType().String()) != typ {
			missing = append(missing, name+" "+typ)
		}
	}
	for name := range fams {
		if pageFamilies[name] == "" {
			extra = append(extra, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Errorf("/metrics lacks (or types otherwise) %q; has unexpected %q", missing, extra)
	}
	val := func(name string) float64 {
		if f := fams[name]; f != nil && len(f.GetMetric()) > 0 {
			m := f.GetMetric()[len(f.GetMetric())-1]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return -1
	}
	if val("checkpointd_checkpoints") != 3 || val("checkpointd_ipam_unconfigured_sticky_ips") != 4 || val("checkpointd_refusals_total") != 1 {
		t.Errorf("values not as set: checkpoints %v, unconfigured %v, refusals %v", val("checkpointd_checkpoints"),
			val("checkpointd_ipam_unconfigured_sticky_ips"), val("checkpointd_refusals_total"))
	}
	if h := fams["checkpointd_restore_seconds"].GetMetric(); len(h) != 1 || h[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("restore_seconds: %v, want one observation", h)
	}
	if w := fams["checkpointd_placement_writes_total"].GetMetric(); len(w) != 3 || w[0].GetLabel()[0].GetValue() != placement.WriteClaim {
		t.Errorf("placement writes: %v, want claim, release and update at 0", w)
	}
}

// BenchmarkMetricsPage is one scrape of /metrics as the daemon serves it
// (110 pods' worth of series: a network, the counters by reason), the
// per-call cost docs/DESIGN.md's "Libraries" table gives.
func BenchmarkMetricsPage(b *testing.B) {
	m := metrics.New()
	placement.New(nil, placement.Options{Node: "n", Registry: m.Registry, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, v := range []*prometheus.CounterVec{m.Refusals, m.RestoreFailures, m.CopiesRemoved, m.PodErrors} {
		v.WithLabelValues("x").Inc()
	}
	for _, v := range []*prometheus.GaugeVec{m.Allocations, m.Reservations, m.Cooling, m.FreeIPs} {
		v.WithLabelValues("cbr0").Set(110)
	}
	h := Handler(m, health{last: time.Now()}, time.Minute)
	req := httptest.NewRequest("GET", "/metrics", nil)
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
