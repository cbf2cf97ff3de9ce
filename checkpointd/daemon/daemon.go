// Package daemon wires checkpointd together: API client, CRI client, IPAM
// store, policy, per-boot tracker, flannel lease keeper, reconcile loop, and
// the /healthz and /metrics HTTP endpoints. It also holds Cleanup, which
// removes what checkpointd put on a node.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/contact"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// Config is every setting of the daemon (see cmd/checkpointd for flags and defaults).
type Config struct {
	NodeName                  string
	Kubeconfig                string // "" or "in-cluster": in-cluster config
	CheckpointDir             string
	StaticPodDir              string
	KubeletConfig             string // the kubelet's config file; its staticPodPath wins when set
	VolumeDir                 string
	CRIEndpoint               string
	DataDir                   string // stickyip data dir; "" disables IPAM reconciliation
	CNIConfDir                string // CNI network configs, for pool sizes and flannel networks; "" disables
	FlannelSubnetFile         string // flanneld's lease; "auto": the flannel plugin's (see SubnetFile); "" disables keeping it
	AllowNamespaces           string
	AllowPrivilegedNamespaces string
	Grace                     time.Duration
	Stable                    time.Duration
	Interval                  time.Duration
	ProbeInterval             time.Duration
	Timeout                   time.Duration
	Refresh                   time.Duration
	LeakMinAge                time.Duration
	RestoreTimeout            time.Duration
	CorruptRetention          time.Duration
	Reservation               string
	Volumes                   string // "copy" or "drop"
	ListenAddress             string // "" disables the HTTP endpoints
	Placement                 bool   // publish the node's sticky identities in the placement index (needs DataDir)
	Log                       *slog.Logger
}

// Validate checks the config and names the offending setting.
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate that also returns the namespace policy it parsed, so
// that Run parses it once.
func (c *Config) validate() (policy.Policy, error) {
	switch {
	case c.NodeName == "":
		return policy.Policy{}, errors.New("--node-name is empty (and NODE_NAME and the host name gave nothing)")
	case c.CheckpointDir == "":
		return policy.Policy{}, errors.New("--checkpoint-dir is empty")
	case c.StaticPodDir == "":
		return policy.Policy{}, errors.New("--static-pod-dir is empty")
	case c.VolumeDir == "":
		return policy.Policy{}, errors.New("--volume-dir is empty")
	case c.Grace <= 0:
		return policy.Policy{}, fmt.Errorf("--grace-period %s: must be > 0", c.Grace)
	case c.Stable < 0:
		return policy.Policy{}, fmt.Errorf("--api-stable-period %s: must be >= 0", c.Stable)
	case c.Interval <= 0:
		return policy.Policy{}, fmt.Errorf("--interval %s: must be > 0", c.Interval)
	case c.RestoreTimeout <= 0:
		return policy.Policy{}, fmt.Errorf("--restore-timeout %s: must be > 0", c.RestoreTimeout)
	case c.Volumes != "copy" && c.Volumes != "drop":
		return policy.Policy{}, fmt.Errorf("--volumes %q: want copy or drop", c.Volumes)
	}
	pol, err := policy.Parse(c.AllowNamespaces, c.AllowPrivilegedNamespaces)
	if err != nil {
		return policy.Policy{}, err
	}
	if c.Reservation != "" {
		// The value becomes the copy's reservation annotation: check it with
		// the plugin's own parser, or the copy would never get a network.
		if _, err := contract.ParseReservedDuration(c.Reservation); err != nil {
			return policy.Policy{}, fmt.Errorf("--restore-reservation: %w", err)
		}
	}
	return pol, nil
}

// StaticPodPath reads staticPodPath from a KubeletConfiguration file.
func StaticPodPath(kubeletConfig string) (string, error) {
	data, err := os.ReadFile(kubeletConfig)
	if err != nil {
		return "", fmt.Errorf("--kubelet-config: %w", err)
	}
	p, err := parseStaticPodPath(data)
	if err != nil {
		return "", fmt.Errorf("--kubelet-config %s: %w", kubeletConfig, err)
	}
	return p, nil
}

func parseStaticPodPath(data []byte) (string, error) {
	var kc struct {
		Kind          string `json:"kind"`
		StaticPodPath string `json:"staticPodPath"`
	}
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return "", err
	}
	if kc.Kind != "KubeletConfiguration" {
		return "", fmt.Errorf("kind %q, want KubeletConfiguration", kc.Kind)
	}
	if kc.StaticPodPath == "" {
		return "", errors.New("it sets no staticPodPath: this kubelet runs no static pods, so nothing can be restored")
	}
	if !filepath.IsAbs(kc.StaticPodPath) {
		return "", fmt.Errorf("staticPodPath %q is not an absolute path", kc.StaticPodPath)
	}
	return filepath.Clean(kc.StaticPodPath), nil
}

// RestConfig builds the API client config. A kubeconfig is used as is (the
// kubelet's own, /etc/kubernetes/kubelet.conf, works on kubeadm nodes: it is
// on local disk, needs no API server to load, and carries the node's
// identity, which the Node authorizer limits to what the node's pods use).
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

// Run runs the daemon until ctx is done. When it returns it has removed the
// manifests of the static copies it placed (their files stay: a copy the
// kubelet keeps running still reads them). While the API server is away
// the kubelet keeps running such a copy, and a restarted checkpointd writes
// the same manifest back; once the kubelet reaches the API server it stops
// every copy whose manifest is gone, so a copy never outlives its keeper
// for longer than that.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	pol, err := cfg.validate()
	if err != nil {
		return err
	}
	if cfg.KubeletConfig != "" {
		p, err := StaticPodPath(cfg.KubeletConfig)
		if err != nil {
			return err
		}
		cfg.StaticPodDir = p
	}
	log := cfg.Log
	subnetFile, err := SubnetFile(cfg.FlannelSubnetFile, cfg.CNIConfDir)
	if err != nil {
		return err
	}
	cfg.FlannelSubnetFile = subnetFile
	// client-go logs through klog: send it to the same structured log.
	klog.SetSlogLogger(log.With("component", "client-go"))
	rc, err := RestConfig(cfg.Kubeconfig, cfg.Timeout)
	if err != nil {
		return err
	}
	cs, watch, err := kube.Clients(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	store, err := checkpoint.New(cfg.CheckpointDir)
	if err != nil {
		return err
	}
	clock, err := contact.Open(cfg.CheckpointDir)
	if err != nil {
		// Unknown counts as out of contact forever: only pods nothing
		// replaces are restored until the API server answers again.
		log.Warn("only pods that no controller replaces will be restored until the API server answers", "err", err)
	}
	tracker, err := boot.Open(cfg.VolumeDir, boot.KernelBootID())
	if err != nil {
		return fmt.Errorf("--volume-dir: %w", err)
	}
	if !boot.OnTmpfs(cfg.VolumeDir) {
		log.Warn("--volume-dir is not on tmpfs: restored secrets are written to a disk, and reboots are told apart by the kernel's boot ID alone",
			"volumeDir", cfg.VolumeDir)
	}
	runtime, err := cri.Dial(cfg.CRIEndpoint, cfg.Timeout)
	if err != nil {
		return err
	}
	defer runtime.Close()
	var ipamStore reconcile.IPAM
	var holds func() (func(reservation.Entry) bool, error)
	if cfg.DataDir != "" {
		s := ipamstore.New(cfg.DataDir, cfg.Timeout, log.With("component", "ipam")).WithCNIConfDir(cfg.CNIConfDir)
		ipamStore, holds = s, s.NodeHolds
	}
	var lease *flannel.Keeper
	if cfg.FlannelSubnetFile != "" {
		lease = &flannel.Keeper{
			SubnetFile: cfg.FlannelSubnetFile,
			SavedFile:  filepath.Join(cfg.CheckpointDir, flannel.SavedFileName),
			MarkerFile: filepath.Join(cfg.VolumeDir, flannel.MarkerFileName),
			Log:        log.With("component", "flannel-lease"),
		}
		if ipamStore != nil && cfg.CNIConfDir != "" {
			lease.Check = reconcile.LeaseCheck(ipamStore, func() ([]string, error) {
				return ipamstore.FlannelNetworks(cfg.CNIConfDir, cfg.FlannelSubnetFile)
			})
		}
	}
	m := metrics.New()
	api := kube.New(cs, kube.Options{
		Node: cfg.NodeName, ProbeInterval: cfg.ProbeInterval, Timeout: cfg.Timeout, Watch: watch,
		Log: log.With("component", "api"),
	})
	var pub *placement.Publisher
	if cfg.Placement && ipamStore != nil {
		pub, err = placement.New(rc, placement.Options{Node: cfg.NodeName, Store: ipamStore, Holds: holds, Interval: cfg.Interval,
			WrittenFile: filepath.Join(cfg.CheckpointDir, placement.WrittenFileName),
			Timeout:     cfg.Timeout, Registry: m.Registry, Log: log.With("component", "placement")})
		if err != nil {
			return fmt.Errorf("placement client: %w", err)
		}
	}
	events := kube.NewRecorder(cs, cfg.NodeName, log)
	defer events.Stop()
	rec := reconcile.New(reconcile.Config{
		Node: cfg.NodeName, Store: store, StaticDir: cfg.StaticPodDir, VolumeDir: cfg.VolumeDir,
		Runtime: runtime, API: api, Boot: tracker, Policy: pol, IPAM: ipamStore, Events: events, Lease: lease,
		Contact: clock, Metrics: m, Log: log,
		Grace: cfg.Grace, Stable: cfg.Stable, Refresh: cfg.Refresh, LeakMinAge: cfg.LeakMinAge,
		RestoreTimeout: cfg.RestoreTimeout, CorruptRetention: cfg.CorruptRetention,
		Reservation: cfg.Reservation, SkipVolumes: cfg.Volumes == "drop",
	})

	log.Info("checkpointd starting", "node", cfg.NodeName, "apiServer", rc.Host, "policy", pol.String(),
		"checkpointDir", cfg.CheckpointDir, "staticPodDir", cfg.StaticPodDir, "volumeDir", cfg.VolumeDir,
		"newBoot", tracker.Fresh(), "criEndpoint", cfg.CRIEndpoint, "dataDir", cfg.DataDir, "cniConfDir", cfg.CNIConfDir,
		"flannelSubnetFile", cfg.FlannelSubnetFile, "gracePeriod", cfg.Grace, "apiStablePeriod", cfg.Stable,
		"interval", cfg.Interval, "volumes", cfg.Volumes, "listen", cfg.ListenAddress, "placement", pub != nil)

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
	if pub != nil {
		wg.Add(1)
		go func() { defer wg.Done(); pub.Run(ctx) }()
	}
	<-ctx.Done()
	wg.Wait()
	// No copy outlives its keeper: a copy nobody watches would never be
	// handed back, and its parent would wait for its IP forever. Its files
	// stay (see Run's doc).
	removed, err := reconcile.StopCopies(cfg.StaticPodDir, cfg.VolumeDir)
	if len(removed) > 0 {
		log.Info("checkpointd stopping: its static copies removed", "copies", strings.Join(removed, ","))
	}
	if err != nil {
		log.Error("checkpointd stopping: cannot remove its static copies; run `checkpointd cleanup`", "err", err)
	}
	log.Info("checkpointd stopped")
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// Cleanup removes what checkpointd put on the node: with all false, its
// static copies' manifests (what the systemd unit runs whenever the daemon
// stops, crashes included; the copies' files stay for a copy the kubelet
// keeps running until it reaches the API server, and go with the next
// checkpointd's first pass, a reboot (tmpfs) or --all); with all, also the
// copies' files, every checkpoint, stored secret, absence mark, corrupt
// record, the saved flannel lease, the last API contact, the list of
// placement shards written and the per-boot files. It never touches a file
// it did not write (nor the placement index in the API: an administrator
// removes it with kubectl). It returns the paths it
// removed.
func Cleanup(cfg Config, all bool) ([]string, error) {
	if cfg.KubeletConfig != "" {
		p, err := StaticPodPath(cfg.KubeletConfig)
		if err != nil {
			return nil, err
		}
		cfg.StaticPodDir = p
	}
	if !all {
		return reconcile.StopCopies(cfg.StaticPodDir, cfg.VolumeDir)
	}
	removed, err := reconcile.RemoveCopies(cfg.StaticPodDir, cfg.VolumeDir)
	if err != nil {
		return removed, err
	}
	store := checkpoint.Open(cfg.CheckpointDir)
	more, err := store.Purge(flannel.SavedFileName, contact.FileName, placement.WrittenFileName)
	removed = append(removed, more...)
	if err != nil {
		return removed, err
	}
	for _, name := range []string{boot.FileName, flannel.MarkerFileName} {
		p := filepath.Join(cfg.VolumeDir, name)
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
	}
	_ = os.Remove(cfg.VolumeDir) // only when empty
	return removed, nil
}

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
