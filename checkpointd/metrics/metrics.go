// Package metrics defines checkpointd's Prometheus metrics, with the
// Prometheus Go client (client_golang), which also exposes them (served at
// /metrics) with the Go runtime's and the process's standard ones: a text
// writer of checkpointd's own would save 2.1 MB of binary, and the client
// fits the budget (docs/DESIGN.md, "Libraries").
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes the name of every metric of checkpointd's own.
const Namespace = "checkpointd_"

// Metrics are checkpointd's metrics. Gauges are set by every reconcile pass.
type Metrics struct {
	Registry *prometheus.Registry

	Checkpoints      prometheus.Gauge
	CorruptTotal     prometheus.Counter
	SavesTotal       prometheus.Counter
	Refusals         *prometheus.CounterVec
	RestoresActive   prometheus.Gauge
	RestoresTotal    prometheus.Counter
	RestoreFailures  *prometheus.CounterVec
	RestoreSeconds   prometheus.Histogram
	HandBacksTotal   prometheus.Counter
	CopiesRemoved    *prometheus.CounterVec
	ReleasesTotal    prometheus.Counter
	PodErrors        *prometheus.CounterVec
	APIReachable     prometheus.Gauge
	Allocations      *prometheus.GaugeVec
	Reservations     *prometheus.GaugeVec
	Cooling          *prometheus.GaugeVec
	FreeIPs          *prometheus.GaugeVec
	ReconciledLeaks  prometheus.Counter
	LeaseRestores    prometheus.Counter
	LeaseErrors      prometheus.Counter
	NodeRangeChanges prometheus.Counter
	ReconcileErrors  prometheus.Counter
	// PassesTotal counts the passes that observed the node and acted: a
	// test (or an operator) waits for N more of them to know checkpointd
	// had its chance to act, instead of sleeping.
	PassesTotal prometheus.Counter
	// UnconfiguredSticky: sticky records of networks the CNI configuration
	// no longer keeps in this store (reconcile's cniConfig).
	UnconfiguredSticky *prometheus.GaugeVec

	StoreDamaged        prometheus.Gauge
	StoreRebuilds       prometheus.Counter
	StoreRebuildSeconds prometheus.Gauge
	StoreUnplaced       prometheus.Counter
	StoreRebuildWaiting prometheus.Gauge
	// A new store on a node re-installed under the same name (rebuild's
	// newStore).
	StoreReclaims       prometheus.Counter
	StoreReclaimSeconds prometheus.Gauge
	StoreReclaimWaiting prometheus.Gauge
	LastReconcileUTC    prometheus.Gauge
}

// New creates and registers the metrics (plus the Go runtime and process ones).
func New() *Metrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: Namespace + name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: Namespace + name, Help: help})
	}
	cv := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: Namespace + name, Help: help}, []string{label})
	}
	gv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: Namespace + name, Help: help}, []string{"network"})
	}
	m := &Metrics{
		Registry:        prometheus.NewRegistry(),
		Checkpoints:     g("checkpoints", "Valid checkpoint records on disk."),
		CorruptTotal:    c("checkpoints_corrupt_total", "Checkpoint records that failed verification and were set aside."),
		SavesTotal:      c("checkpoint_saves_total", "Checkpoint records written (new pods and changed pods)."),
		Refusals:        cv("refusals_total", "Opted-in pods the node's policy refuses, by reason (counted once per pod and reason).", "reason"),
		RestoresActive:  g("restores_active", "Static copies currently in the kubelet's static pod directory."),
		RestoresTotal:   c("restores_total", "Static copies written while the API server was unreachable."),
		RestoreFailures: cv("restore_failures_total", "Restores that failed: invalid-manifest (not written), no-sandbox (written, not running after --restore-timeout).", "reason"),
		RestoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: Namespace + "restore_seconds",
			Help: "Time from writing a static copy to its sandbox running.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		HandBacksTotal:      c("handbacks_total", "Static copies removed to hand the pod back to the API server."),
		CopiesRemoved:       cv("copies_removed_total", "Static copies removed, by reason.", "reason"),
		ReleasesTotal:       c("releases_total", "Checkpoints deleted: parent gone for the grace period, or refused by policy."),
		PodErrors:           cv("pod_errors_total", "Per-pod step failures (counted once per distinct error), by step.", "step"),
		APIReachable:        g("api_reachable", "1 when the API server is reachable and the pod watch has synced."),
		Allocations:         gv("ipam_allocations", "IPs held by live sandboxes, per network."),
		Reservations:        gv("ipam_reservations", "IPs reserved for deleted pods, per network."),
		Cooling:             gv("ipam_cooling_ips", "IPs freed less than reservation.reuseDelay ago, skipped while others are free, per network."),
		FreeIPs:             gv("ipam_free_ips", "IPs neither allocated, reserved nor cooling, per network (from the CNI configs' ranges, as `stickyip status` counts them)."),
		UnconfiguredSticky:  gv("ipam_unconfigured_sticky_ips", "Reservations and allocations with a reservation duration in networks whose CNI config no longer uses this store (the conflist switched back to another IPAM): not 0 means the node silently lost stickyip."),
		ReconciledLeaks:     c("ipam_reconciled_leaks_total", "Allocations whose sandbox no longer existed, handled as DEL."),
		LeaseRestores:       c("flannel_lease_restores_total", "Times the saved flannel subnet lease was put back because flanneld had not written one this boot."),
		LeaseErrors:         c("flannel_lease_errors_total", "Flannel lease rounds that failed (unreadable, invalid, or not matching the IPAM)."),
		NodeRangeChanges:    c("node_pod_cidr_changes_total", "Times the Node's pod CIDRs changed (registered again with another podCIDR); the old ranges are retired."),
		ReconcileErrors:     c("reconcile_errors_total", "Reconcile passes that could not observe the node (runtime or disk unreadable)."),
		PassesTotal:         c("reconcile_passes_total", "Reconcile passes that observed the node and acted on it (each step done or retried next pass)."),
		StoreDamaged:        g("ipam_store_damaged", "1 while the stickyip store cannot be used (damaged, or missing on a node that had one) and is not rebuilt: no pod gets an address."),
		StoreRebuilds:       c("ipam_store_rebuilds_total", "Times the stickyip store was rebuilt from the node's sources (the damaged file kept aside)."),
		StoreRebuildSeconds: g("ipam_store_rebuild_seconds", "Time from the last damage seen to its rebuilt store in place."),
		StoreUnplaced:       c("ipam_store_rebuild_unplaced_total", "Addresses or reservations a rebuild could not place (each named in the log and the Event)."),
		StoreRebuildWaiting: g("ipam_store_rebuild_waiting", "1 while a store rebuilt without the API server waits for the placement index's reservations (no new address is handed out)."),
		StoreReclaims:       c("ipam_store_reclaims_total", "Times a node without a store (re-installed under the same name) got its store back from its placement index entries."),
		StoreReclaimSeconds: g("ipam_store_reclaim_seconds", "Time from the node's first look for its store (its first CNI call or checkpointd's first pass) to the store made from its placement entries."),
		StoreReclaimWaiting: g("ipam_store_reclaim_waiting", "1 while a node without a store holds back a new one until its placement index entries are read (no address is handed out)."),
		LastReconcileUTC:    g("last_reconcile_timestamp_seconds", "Unix time of the last successful reconcile pass."),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Checkpoints, m.CorruptTotal, m.SavesTotal, m.Refusals, m.RestoresActive, m.RestoresTotal,
		m.RestoreFailures, m.RestoreSeconds, m.HandBacksTotal, m.CopiesRemoved, m.ReleasesTotal, m.PodErrors,
		m.APIReachable, m.Allocations, m.Reservations, m.Cooling, m.FreeIPs, m.UnconfiguredSticky, m.ReconciledLeaks, m.LeaseRestores,
		m.LeaseErrors, m.NodeRangeChanges, m.ReconcileErrors, m.PassesTotal, m.LastReconcileUTC,
		m.StoreDamaged, m.StoreRebuilds, m.StoreRebuildSeconds, m.StoreUnplaced, m.StoreRebuildWaiting,
		m.StoreReclaims, m.StoreReclaimSeconds, m.StoreReclaimWaiting,
	)
	return m
}

// Handler serves the registry's metrics in the Prometheus text format (or
// OpenMetrics, or gzip-compressed, as the scraper asks).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
