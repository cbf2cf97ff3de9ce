// Package daemon wires checkpointd together: API client, CRI client, IPAM
// store, reconcile loop, and the /healthz and /metrics HTTP endpoints.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
	"github.com/stickyip/stickyip/contract"
)

// Config is every setting of the daemon (see cmd/checkpointd for flags and defaults).
type Config struct {
	NodeName      string
	Kubeconfig    string // "" or "in-cluster": in-cluster config
	CheckpointDir string
	StaticPodDir  string
	VolumeDir     string
	CRIEndpoint   string
	DataDir       string // stickyip data dir; "" disables IPAM reconciliation
	CNIConfDir    string // CNI network configs, for pool sizes (free IPs metric); "" disables
	Grace         time.Duration
	Interval      time.Duration
	ProbeInterval time.Duration
	Timeout       time.Duration
	Refresh       time.Duration
	LeakMinAge    time.Duration
	Reservation   string
	Volumes       string // "copy" or "drop"
	ListenAddress string // "" disables the HTTP endpoints
	Log           *slog.Logger
}

// Validate checks the config and names the offending setting.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("--node-name is empty (and NODE_NAME and the host name gave nothing)")
	case c.CheckpointDir == "":
		return errors.New("--checkpoint-dir is empty")
	case c.StaticPodDir == "":
		return errors.New("--static-pod-dir is empty")
	case c.VolumeDir == "":
		return errors.New("--volume-dir is empty")
	case c.Grace <= 0:
		return fmt.Errorf("--grace-period %s: must be > 0", c.Grace)
	case c.Interval <= 0:
		return fmt.Errorf("--interval %s: must be > 0", c.Interval)
	case c.Volumes != "copy" && c.Volumes != "drop":
		return fmt.Errorf("--volumes %q: want copy or drop", c.Volumes)
	}
	if c.Reservation != "" {
		// The value becomes the copy's reservation annotation: check it with
		// the plugin's own parser, or the copy would never get a network.
		if _, err := contract.ParseReservedDuration(c.Reservation); err != nil {
			return fmt.Errorf("--restore-reservation: %w", err)
		}
	}
	return nil
}

// RestConfig builds the API client config. A kubeconfig is used as is (the
// kubelet's own, /etc/kubernetes/kubelet.conf, works on kubeadm nodes:
// it is on local disk and needs no API server to load).
func RestConfig(kubeconfig string, timeout time.Duration) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" || kubeconfig == "in-cluster" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("API client config (--kubeconfig %q): %w", kubeconfig, err)
	}
	cfg.Timeout = timeout
	cfg.UserAgent = "checkpointd"
	return cfg, nil
}

// Run runs the daemon until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Log
	// client-go logs through klog: send it to the same structured log.
	klog.SetSlogLogger(log.With("component", "client-go"))
	rc, err := RestConfig(cfg.Kubeconfig, cfg.Timeout)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	store, err := checkpoint.New(cfg.CheckpointDir)
	if err != nil {
		return err
	}
	runtime, err := cri.Dial(cfg.CRIEndpoint, cfg.Timeout)
	if err != nil {
		return err
	}
	defer runtime.Close()
	var ipamStore reconcile.IPAM
	if cfg.DataDir != "" {
		ipamStore = ipamstore.New(cfg.DataDir, cfg.Timeout, log.With("component", "ipam")).WithCNIConfDir(cfg.CNIConfDir)
	}
	m := metrics.New()
	api := kube.New(cs, kube.Options{
		Node: cfg.NodeName, ProbeInterval: cfg.ProbeInterval, Timeout: cfg.Timeout,
		Log: log.With("component", "api"),
	})
	rec := reconcile.New(reconcile.Config{
		Node: cfg.NodeName, Store: store, StaticDir: cfg.StaticPodDir, VolumeDir: cfg.VolumeDir,
		Runtime: runtime, API: api, IPAM: ipamStore, Metrics: m, Log: log,
		Grace: cfg.Grace, Refresh: cfg.Refresh, LeakMinAge: cfg.LeakMinAge,
		Reservation: cfg.Reservation, SkipVolumes: cfg.Volumes == "drop",
	})

	log.Info("checkpointd starting", "node", cfg.NodeName, "apiServer", rc.Host, "checkpointDir", cfg.CheckpointDir,
		"staticPodDir", cfg.StaticPodDir, "volumeDir", cfg.VolumeDir, "criEndpoint", cfg.CRIEndpoint,
		"dataDir", cfg.DataDir, "cniConfDir", cfg.CNIConfDir, "gracePeriod", cfg.Grace, "interval", cfg.Interval, "volumes", cfg.Volumes,
		"listen", cfg.ListenAddress)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	if cfg.ListenAddress != "" {
		ln, err := net.Listen("tcp", cfg.ListenAddress)
		if err != nil {
			return fmt.Errorf("--listen-address %s: %w", cfg.ListenAddress, err)
		}
		srv := &http.Server{Handler: Handler(m, rec, 3*cfg.Interval+cfg.Timeout), ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("HTTP server: %w", err)
				cancel()
			}
		}()
		go func() {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	wg.Add(2)
	go func() { defer wg.Done(); api.Run(ctx) }()
	go func() { defer wg.Done(); rec.Run(ctx, cfg.Interval) }()
	<-ctx.Done()
	wg.Wait()
	log.Info("checkpointd stopped")
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Healther reports the last successful reconcile pass and the last error.
type Healther interface {
	Health() (time.Time, error)
}

// Handler serves /metrics and /healthz. /healthz answers 200 "ok" when a
// reconcile pass succeeded within maxAge, else 503 with the reason. An
// unreachable API server does not make checkpointd unhealthy (that is the
// situation it exists for); an unreachable container runtime does.
func Handler(m *metrics.Metrics, h Healther, maxAge time.Duration) http.Handler {
	start := time.Now()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
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
			msg := "no successful reconcile pass"
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

// DefaultNodeName returns NODE_NAME, else the lower-cased host name (the kubelet's default).
func DefaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return strings.ToLower(h)
}
