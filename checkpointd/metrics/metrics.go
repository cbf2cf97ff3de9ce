// Package metrics defines checkpointd's Prometheus metrics, on a registry of
// their own (served at /metrics).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are checkpointd's metrics. Gauges are set by every reconcile pass.
type Metrics struct {
	Registry *prometheus.Registry

	Checkpoints      prometheus.Gauge
	CorruptTotal     prometheus.Counter
	SavesTotal       prometheus.Counter
	RestoresActive   prometheus.Gauge
	RestoresTotal    prometheus.Counter
	HandBacksTotal   prometheus.Counter
	ReleasesTotal    prometheus.Counter
	APIReachable     prometheus.Gauge
	Allocations      *prometheus.GaugeVec
	Reservations     *prometheus.GaugeVec
	FreeIPs          *prometheus.GaugeVec
	ReconciledLeaks  prometheus.Counter
	ReconcileErrors  prometheus.Counter
	LastReconcileUTC prometheus.Gauge
}

// New creates and registers the metrics (plus Go and process collectors).
func New() *Metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "checkpointd", Name: name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "checkpointd", Name: name, Help: help})
	}
	gv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "checkpointd", Name: name, Help: help}, []string{"network"})
	}
	m := &Metrics{
		Registry:         prometheus.NewRegistry(),
		Checkpoints:      g("checkpoints", "Valid checkpoint records on disk."),
		CorruptTotal:     c("checkpoints_corrupt_total", "Checkpoint records that failed verification and were set aside."),
		SavesTotal:       c("checkpoint_saves_total", "Checkpoint records written (new pods and changed pods)."),
		RestoresActive:   g("restores_active", "Static copies currently in the kubelet's static pod directory."),
		RestoresTotal:    c("restores_total", "Static copies written while the API server was unreachable."),
		HandBacksTotal:   c("handbacks_total", "Static copies removed to hand the pod back to the API server."),
		ReleasesTotal:    c("releases_total", "Checkpoints released because the parent pod was gone for the grace period."),
		APIReachable:     g("api_reachable", "1 when the API server is reachable and the pod watch has synced."),
		Allocations:      gv("ipam_allocations", "IPs held by live sandboxes, per network."),
		Reservations:     gv("ipam_reservations", "IPs reserved for deleted pods, per network."),
		FreeIPs:          gv("ipam_free_ips", "IPs neither allocated nor reserved, per network (when the IPAM reports pool sizes)."),
		ReconciledLeaks:  c("ipam_reconciled_leaks_total", "Allocations whose sandbox no longer existed, handled as DEL."),
		ReconcileErrors:  c("reconcile_errors_total", "Reconcile passes that failed."),
		LastReconcileUTC: g("last_reconcile_timestamp_seconds", "Unix time of the last successful reconcile pass."),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Checkpoints, m.CorruptTotal, m.SavesTotal, m.RestoresActive, m.RestoresTotal,
		m.HandBacksTotal, m.ReleasesTotal, m.APIReachable, m.Allocations, m.Reservations,
		m.FreeIPs, m.ReconciledLeaks, m.ReconcileErrors, m.LastReconcileUTC,
	)
	return m
}
