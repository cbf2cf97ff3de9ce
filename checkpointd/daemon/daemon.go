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
	"os"
	"path/filepath"

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
	p := &parts{host: rc.Host, fresh: tracker.Fresh(), runtime: runtime, m: metrics.New(), memory: newMemoryReleaser()}
	p.api = kube.New(cs, kube.Options{
		Node: cfg.NodeName, ProbeInterval: cfg.ProbeInterval, Timeout: cfg.Timeout,
		Log: log.With("component", "api"),
	})
	p.events = kube.NewRecorder(cs, cfg.NodeName, cfg.Timeout, log.With("component", "events"))
	var store *ipamstore.Store
	var ipamStore reconcile.IPAM
	var repair reconcile.Repairer
	if cfg.DataDir != "" {
		store = ipamstore.New(cfg.DataDir, cfg.Timeout, log.With("component", "ipam")).WithCNIConfDir(cfg.CNIConfDir).WithCNIResultsDir(cfg.CNIResultsDir)
		ipamStore = store
		if repair, err = p.buildStoreParts(cfg, cs, store, checkpoints); err != nil {
			return nil, errors.Join(err, runtime.Close())
		}
	}
	p.rec = reconcile.New(reconcile.Config{
		Node: cfg.NodeName, Store: checkpoints, StaticDir: cfg.StaticPodDir, VolumeDir: cfg.VolumeDir,
		Runtime: runtime, API: p.api, Boot: tracker, Policy: pol, IPAM: ipamStore, Repair: repair, Events: p.events,
		Lease: flannelKeeper(cfg, store), Contact: clock, Metrics: p.m, Log: log, AfterPass: p.memory.afterPass,
		Grace: cfg.Grace, Stable: cfg.Stable, Refresh: cfg.Refresh, LeakMinAge: cfg.LeakMinAge,
		RestoreTimeout: cfg.RestoreTimeout, CorruptRetention: cfg.CorruptRetention,
		Reservation: cfg.Reservation, SkipVolumes: cfg.Volumes == "drop",
	})
	return p, nil
}

// flannelKeeper is the keeper of flannel's lease, when checkpointd keeps it
// (nil otherwise); with an IPAM store, a saved lease is checked against the
// networks the store holds before it is put back.
func flannelKeeper(cfg config.Config, store *ipamstore.Store) *flannel.Keeper {
	if cfg.FlannelSubnetFile == "" {
		return nil
	}
	lease := &flannel.Keeper{
		SubnetFile: cfg.FlannelSubnetFile,
		SavedFile:  filepath.Join(cfg.CheckpointDir, flannel.SavedFileName),
		MarkerFile: filepath.Join(cfg.VolumeDir, flannel.MarkerFileName),
		Log:        cfg.Log.With("component", "flannel-lease"),
	}
	if store != nil && cfg.CNIConfDir != "" {
		lease.Check = flannel.IPAMCheck(func() (*ipamstore.View, error) { return store.Observe() },
			func(v *ipamstore.View) []string { return flannel.Networks(v.Conf, cfg.FlannelSubnetFile) })
	}
	return lease
}

// buildStoreParts builds what runs beside an IPAM store: the placement
// publisher and the watch of the node's NodeRecord (with --placement), the
// StatefulSet retention follower, and the store's repair (its rebuild).
func (p *parts) buildStoreParts(cfg config.Config, cs *kube.REST, store *ipamstore.Store, checkpoints *checkpoint.Store) (reconcile.Repairer, error) {
	log := cfg.Log
	// The publisher and the StatefulSet follower read the store as the
	// reconcile pass does: a change is read once, by whichever asks first.
	o := &observed{store: store}
	var index rebuild.Index // the node's own NodeRecord: the reservations of deleted pods
	if cfg.Placement {
		// While a store rebuilt without the API server waits for the
		// record's reservations, the publisher leaves the record alone.
		// It uses the same API client; its requests have their own rate
		// limit: its writes do not queue behind a burst of Events.
		pc, err := cs.WithOwnRateLimit()
		if err != nil {
			return nil, fmt.Errorf("placement client: %w", err)
		}
		plog := log.With("component", "placement")
		records := placement.NewAPI(pc, cfg.NodeName)
		p.records = records
		p.watcher = placement.NewWatcher(cs, cfg.NodeName, plog)
		p.pub = placement.New(records, placement.Options{Node: cfg.NodeName,
			Store: rebuild.Published{Store: o}, Holds: o.holds, NodeObject: p.api.Node, Record: p.watcher.Record,
			Interval: cfg.Interval, Timeout: cfg.Timeout, Registry: p.m.Registry, Log: plog})
		index = rebuild.RecordIndex{Reader: records}
	}
	// Always run: with following off it ends the holds of before.
	ro := retention.Options{Store: o.forFollower(), Interval: cfg.Interval, Registry: p.m.Registry, Log: log.With("component", "retention")}
	if cfg.FollowStatefulSets && p.watcher != nil {
		ro.Verdicts = p.watcher
	}
	p.follow = retention.New(ro)
	return rebuild.New(rebuild.Config{
		Enabled: cfg.RebuildStore, Store: store, Runtime: p.runtime, ResultsDir: cfg.CNIResultsDir,
		Checkpoints: checkpoints.Records, Index: index,
		API: p.api, Node: nodeEvents{p.api, p.events}, Metrics: p.m, Log: log.With("component", "rebuild"),
	}), nil
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
