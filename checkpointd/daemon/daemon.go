// Package daemon wires checkpointd together: API client, CRI client, IPAM
// store, policy, per-boot tracker, flannel lease keeper, reconcile loop,
// placement publisher, StatefulSet retention follower, and the /healthz
// and /metrics HTTP endpoints.
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

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
	"github.com/stickyip/stickyip/checkpointd/retention"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// Run runs the daemon until ctx is done. When it returns it has removed the
// manifests of the static copies it placed (their files stay: a copy the
// kubelet keeps running still reads them). While the API server is away
// the kubelet keeps running such a copy, and a restarted checkpointd writes
// the same manifest back; once the kubelet reaches the API server it stops
// every copy whose manifest is gone, so a copy never outlives its keeper
// for longer than that.
func Run(ctx context.Context, cfg config.Config) error {
	oneProcessor(os.Getenv)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg, pol, err := cfg.Resolve()
	if err != nil {
		return err
	}
	p, err := build(cfg, pol)
	if err != nil {
		return err
	}
	log := cfg.Log
	defer p.close(log)
	log.Info("checkpointd starting", "node", cfg.NodeName, "apiServer", p.host, "policy", pol.String(),
		"checkpointDir", cfg.CheckpointDir, "staticPodDir", cfg.StaticPodDir, "volumeDir", cfg.VolumeDir,
		"newBoot", p.fresh, "criEndpoint", cfg.CRIEndpoint, "dataDir", cfg.DataDir, "cniConfDir", cfg.CNIConfDir,
		"flannelSubnetFile", cfg.FlannelSubnetFile, "gracePeriod", cfg.Grace, "apiStablePeriod", cfg.Stable,
		"interval", cfg.Interval, "volumes", cfg.Volumes, "listen", cfg.ListenAddress, "placement", p.pub != nil, "followStatefulSets", cfg.FollowStatefulSets && p.watcher != nil,
		"rebuildStore", cfg.RebuildStore && cfg.DataDir != "", "cniResultsDir", cfg.CNIResultsDir)
	return serve(ctx, cfg, p)
}

// parts are what Run builds from the resolved configuration and runs.
type parts struct {
	host    string // the API server's
	fresh   bool   // the node booted since checkpointd last ran
	runtime *cri.Client
	events  *kube.Recorder
	api     *kube.Client
	rec     *reconcile.Reconciler
	pub     *placement.Publisher // nil: placement off
	watcher *placement.Watcher   // the node's NodeRecord; nil: placement off
	records placement.API        // the publisher's client of the record (its own rate limit); nil: placement off
	follow  *retention.Follower  // nil: no IPAM store
	m       *metrics.Metrics
	memory  *memoryReleaser
}

// close releases what the parts hold open.
func (p *parts) close(log *slog.Logger) {
	p.events.Stop()
	if err := p.runtime.Close(); err != nil {
		log.Warn("closing the CRI connection", "err", err)
	}
}

// restConfig is config.RestConfig (a test lowers its rate limit).
var restConfig = config.RestConfig

// build connects checkpointd's parts: API and CRI clients, the checkpoint,
// contact, boot and IPAM stores, the flannel lease keeper, the placement
// publisher and the reconciler.
func build(cfg config.Config, pol policy.Policy) (*parts, error) {
	log := cfg.Log
	// client-go logs through klog: send it to the same structured log.
	klog.SetSlogLogger(log.With("component", "client-go"))
	rc, err := restConfig(cfg.Kubeconfig, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	cs, err := kube.NewREST(rc)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	checkpoints, err := checkpoint.New(cfg.CheckpointDir)
	if err != nil {
		return nil, err
	}
	clock, err := boot.OpenClock(cfg.CheckpointDir)
	if err != nil {
		// Unknown counts as out of contact forever: only pods nothing
		// replaces are restored until the API server answers again.
		log.Warn("only pods that no controller replaces will be restored until the API server answers", "err", err)
	}
	tracker, err := boot.Open(cfg.VolumeDir, boot.KernelBootID())
	if err != nil {
		return nil, fmt.Errorf("--volume-dir: %w", err)
	}
	if !boot.OnTmpfs(cfg.VolumeDir) {
		log.Warn("--volume-dir is not on tmpfs: restored secrets are written to a disk, and reboots are told apart by the kernel's boot ID alone",
			"volumeDir", cfg.VolumeDir)
	}
	runtime, err := cri.Dial(cfg.CRIEndpoint, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	var ipamStore reconcile.IPAM
	var store *ipamstore.Store
	if cfg.DataDir != "" {
		store = ipamstore.New(cfg.DataDir, cfg.Timeout, log.With("component", "ipam")).WithCNIConfDir(cfg.CNIConfDir).WithCNIResultsDir(cfg.CNIResultsDir)
		ipamStore = store
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
			lease.Check = flannel.IPAMCheck(func() (*ipamstore.View, error) { return store.Observe() },
				func(v *ipamstore.View) []string { return flannel.Networks(v.Conf, cfg.FlannelSubnetFile) })
		}
	}
	m := metrics.New()
	api := kube.New(cs, kube.Options{
		Node: cfg.NodeName, ProbeInterval: cfg.ProbeInterval, Timeout: cfg.Timeout,
		Log: log.With("component", "api"),
	})
	// The publisher and the StatefulSet follower read the store as the
	// reconcile pass does: a change is read once, by whichever asks first.
	var o *observed
	if store != nil {
		o = &observed{store: store}
	}
	var pub *placement.Publisher
	var watcher *placement.Watcher
	var records placement.API
	if cfg.Placement && ipamStore != nil {
		// While a store rebuilt without the API server waits for the
		// record's reservations, the publisher leaves the record alone.
		// It uses the same API client; its requests have their own rate
		// limit: its writes do not queue behind a burst of Events.
		pc, err := cs.WithOwnRateLimit()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("placement client: %w", err), runtime.Close())
		}
		plog := log.With("component", "placement")
		records = placement.NewAPI(pc, cfg.NodeName)
		watcher = placement.NewWatcher(cs, cfg.NodeName, plog)
		pub = placement.New(records, placement.Options{Node: cfg.NodeName,
			Store: rebuild.Published{Store: o}, Holds: o.holds, NodeObject: api.Node, Record: watcher.Record,
			Interval: cfg.Interval, Timeout: cfg.Timeout, Registry: m.Registry, Log: plog})
	}
	var follower *retention.Follower
	if store != nil {
		// Always run: with following off it ends the holds of before.
		ro := retention.Options{Store: o.forFollower(), Interval: cfg.Interval, Registry: m.Registry, Log: log.With("component", "retention")}
		if cfg.FollowStatefulSets && watcher != nil {
			ro.Verdicts = watcher
		}
		follower = retention.New(ro)
	}
	events := kube.NewRecorder(cs, cfg.NodeName, cfg.Timeout, log.With("component", "events"))
	var repair reconcile.Repairer
	if store != nil {
		var index rebuild.Index // the node's own NodeRecord: the reservations of deleted pods
		if records != nil {
			index = rebuild.RecordIndex{Reader: records}
		}
		repair = rebuild.New(rebuild.Config{
			Enabled: cfg.RebuildStore, Store: store, Runtime: runtime, ResultsDir: cfg.CNIResultsDir,
			Checkpoints: checkpoints.Records, Index: index,
			API: api, Node: nodeEvents{api, events}, Metrics: m, Log: log.With("component", "rebuild"),
		})
	}
	memory := newMemoryReleaser()
	rec := reconcile.New(reconcile.Config{
		Node: cfg.NodeName, Store: checkpoints, StaticDir: cfg.StaticPodDir, VolumeDir: cfg.VolumeDir,
		Runtime: runtime, API: api, Boot: tracker, Policy: pol, IPAM: ipamStore, Repair: repair, Events: events, Lease: lease,
		Contact: clock, Metrics: m, Log: log, AfterPass: memory.afterPass,
		Grace: cfg.Grace, Stable: cfg.Stable, Refresh: cfg.Refresh, LeakMinAge: cfg.LeakMinAge,
		RestoreTimeout: cfg.RestoreTimeout, CorruptRetention: cfg.CorruptRetention,
		Reservation: cfg.Reservation, SkipVolumes: cfg.Volumes == "drop",
	})
	return &parts{host: rc.Host, fresh: tracker.Fresh(), runtime: runtime, events: events, api: api, rec: rec, pub: pub, watcher: watcher, records: records, follow: follower,
		m: m, memory: memory}, nil
}

// serve runs the HTTP endpoints, the API client, the reconciler and the
// publisher until ctx is done, then stops checkpointd's static copies.
func serve(ctx context.Context, cfg config.Config, p *parts) error {
	log := cfg.Log
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	if cfg.ListenAddress != "" {
		ln, err := net.Listen("tcp", cfg.ListenAddress)
		if err != nil {
			return fmt.Errorf("--listen-address %s: %w", cfg.ListenAddress, err)
		}
		srv := &http.Server{Handler: Handler(p.m, p.rec, 3*cfg.Interval+cfg.Timeout), ReadHeaderTimeout: 5 * time.Second}
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
			if err := srv.Shutdown(sctx); err != nil {
				log.Warn("HTTP server shutdown", "err", err)
			}
		}()
	}
	if cfg.DataDir != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := watchDataDir(ctx, cfg.DataDir, cfg.Interval); err != nil {
				log.Error("checkpointd stopping", "err", err)
				select {
				case errc <- err:
				default:
				}
				cancel()
			}
		}()
	}
	wg.Add(3)
	go func() { defer wg.Done(); p.api.Run(ctx) }()
	go func() { defer wg.Done(); p.rec.Run(ctx, cfg.Interval) }()
	go func() { defer wg.Done(); p.memory.run(ctx) }()
	if p.pub != nil {
		wg.Add(2)
		go func() { defer wg.Done(); p.watcher.Run(ctx) }()
		go func() { defer wg.Done(); p.pub.Run(ctx) }()
	}
	if p.follow != nil {
		wg.Add(1)
		go func() { defer wg.Done(); p.follow.Run(ctx) }()
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

// nodeEvents posts Events on the node's own Node, as the API client last
// saw it.
type nodeEvents struct {
	api    *kube.Client
	events *kube.Recorder
}

func (n nodeEvents) Node() (*corev1.Node, bool) { return n.api.Node() }

func (n nodeEvents) NodeEvent(node *corev1.Node, eventType, reason, message string) {
	n.events.NodeEvent(node, eventType, reason, message)
}

// observed is the IPAM store as the placement publisher reads it: through
// the store's Observe, which reads the store and the CNI configuration only
// when they changed since the last read, the reconcile pass's or the
// publisher's (each change is read once, by whichever asks first). The
// three questions of one publisher pass (Waiting, Entries, Holds, asked
// one after the other) share one Observe.
type observed struct {
	store *ipamstore.Store
	mu    sync.Mutex
	last  *ipamstore.View
	at    time.Time
}

// sameAsk is how long a view serves the questions of one publisher pass.
const sameAsk = time.Second

func (o *observed) view() (*ipamstore.View, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last != nil && time.Since(o.at) < sameAsk {
		return o.last, nil
	}
	v, err := o.store.Observe()
	if err != nil {
		o.last = nil
		return nil, err
	}
	o.last, o.at = v, time.Now()
	return v, nil
}

// Entries returns the records.
func (o *observed) Entries() ([]reservation.Entry, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Entries, nil
}

// Waiting returns the rebuilt networks that wait for the placement index.
func (o *observed) Waiting() (map[string]time.Time, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Waiting, nil
}

// Missing reports whether the node has no store at all (rebuild.Waiter):
// a stat, not a read.
func (o *observed) Missing() bool { return o.store.Missing() }

// Retain applies the retention follower's changes (retention.Store,
// through forFollower); the engine checks each against the record as it is
// then.
func (o *observed) Retain(network string, changes []ipam.RetentionChange) (int, error) {
	return o.store.Retain(network, changes)
}

// forFollower is the IPAM store as the retention follower reads it: the
// store's Observe at each of its passes (a read only when the store
// changed), never the view kept for a publisher pass. A DEL just before
// the follower's pass leaves a held reservation that pass must see: else
// its release waits a whole interval more, in which a pod of the name
// created again (its StatefulSet deleted and created again) takes the
// address.
func (o *observed) forFollower() retention.Store { return latest{o} }

// latest is observed as the follower reads it (forFollower).
type latest struct{ o *observed }

func (l latest) Entries() ([]reservation.Entry, error) {
	v, err := l.o.store.Observe()
	if err != nil {
		return nil, err
	}
	return v.Entries, nil
}

func (l latest) Retain(network string, changes []ipam.RetentionChange) (int, error) {
	return l.o.Retain(network, changes)
}

// holds is placement.Options.Holds.
func (o *observed) holds() (func(reservation.Entry) bool, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Holds()
}
