package manager

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metricPrefix starts the name of every metric of the controller's own.
const metricPrefix = "stickyip_controller_"

// metrics are the controller's Prometheus metrics, served at /metrics
// with the Go runtime's and the process's.
type metrics struct {
	reg          *prometheus.Registry
	claims       *prometheus.CounterVec
	indexWrites  *prometheus.CounterVec
	statusWrites prometheus.Counter
	identities   prometheus.Gauge
	records      prometheus.Gauge
	leader       prometheus.Gauge
	syncSeconds  prometheus.Histogram
	// passes counts the passes begun: a test (or an operator) reads how
	// many passes a burst took.
	passes prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "claims_total",
			Help: "Verdicts given on claims: accepted (the pod backs it), imported (the former index does, the pod being gone), refused."}, []string{"verdict"}),
		indexWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "index_writes_total",
			Help: "Writes of the placement index's shards (ConfigMaps), by operation (create, patch, delete)."}, []string{"op"}),
		statusWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "status_writes_total",
			Help: "Writes of NodeRecord status."}),
		identities: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricPrefix + "index_identities",
			Help: "Identities in the placement index, all namespaces (the leader's)."}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricPrefix + "records",
			Help: "NodeRecords in the cache."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: metricPrefix + "leader",
			Help: "1 while this replica holds the Lease and writes, else 0."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricPrefix + "sync_seconds",
			Help: "Duration of a pass: judging the changed records, writing the shards and the status.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "passes_total",
			Help: "Passes begun: each judges the records changed since the last, writes the shards and the status."}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.claims, m.indexWrites, m.statusWrites, m.identities, m.records, m.leader, m.syncSeconds, m.passes)
	return m
}
