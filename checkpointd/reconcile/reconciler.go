// Package reconcile is checkpointd's reconcile loop. A pass is a short list
// of named steps:
//
//  1. observe: read the container runtime, the API server's pod cache, the
//     checkpoint directory, the static pod directory and the copies' files
//     once, into one snapshot (observe.go); a failure here is the daemon's
//     own health problem and the pass does nothing else;
//  2. track: record the API contact (kept across reboots), update what the
//     API server last said about each parent, and which parents the kubelet
//     knows this boot (track.go);
//  3. record the Node's pod CIDRs in the IPAM store (noderanges.go: a node
//     registered again with another podCIDR retires the old range) and keep
//     the flannel lease (lease.go; put back only when the API server has
//     been unreachable for the grace period, before any copy is written,
//     and never a lease of a retired range); then rebuild the IPAM store if
//     no call can use it (Repair, checkpointd/rebuild);
//  4. decide and act, per pod identity: state.Decide on the snapshot's
//     inputs, then carry out exactly the actions it returns: save (save.go),
//     refuse (report.go), write files and restore (restore.go), remove
//     copies and files (copies.go), drop checkpoints (drop.go);
//     one pod's error stays that pod's (logged and counted, never the
//     daemon's health);
//  5. confirm that restored copies got a running sandbox (restore.go);
//  6. reconcile the IPAM store with the runtime (ipam.go), say when the CNI
//     configuration no longer uses the store that holds reservations
//     (cniconf.go), forget the identities that left (memory.go), prune old
//     corrupt checkpoints, set the gauges.
//
// Every step is idempotent: what fails is retried by the next pass. Only
// the loop's goroutine touches the Reconciler's state, except Health.
package reconcile

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/policy"
)

// Runtime lists the pod sandboxes the container runtime knows.
type Runtime interface {
	Sandboxes(ctx context.Context) ([]cri.Sandbox, error)
}

// API is what the loop needs from the API server (see package kube).
type API interface {
	// Pods returns the pods bound to the node and whether the watch has synced.
	Pods() ([]*corev1.Pod, bool)
	// Reachable reports reachability and since when it has held.
	Reachable() (bool, time.Time)
	// Object returns the data of a Secret or ConfigMap (kind "Secret" or "ConfigMap").
	Object(ctx context.Context, kind, namespace, name string) (map[string][]byte, error)
}

// Events posts Events on pods (package kube's Recorder).
type Events interface {
	Event(pod *corev1.Pod, eventType, reason, message string)
}

// IPAM is the stickyip store as checkpointd uses it (package ipamstore).
type IPAM interface {
	// Observe reads the store and the CNI config directory once, for a
	// pass: everything the pass asks of them is answered from the view.
	Observe() (*ipamstore.View, error)
	// ReleaseIn handles the allocation of a container the runtime does not
	// list as a CNI DEL (reservation when it has a duration, else freed),
	// by the network's rules as v read them, if the IPAM engine finds its
	// sandbox gone; released is false when the sandbox may be alive (its
	// network namespace still exists).
	ReleaseIn(v *ipamstore.View, network, containerID, ifname string) (released bool, err error)
}

// Repairer rebuilds the IPAM store when no call can use it
// (checkpointd/rebuild).
type Repairer interface {
	// Pass checks the store and rebuilds it when needed; it reports
	// whether it did.
	Pass(ctx context.Context) bool
	// Suspect says a read of the store failed with err.
	Suspect(err error)
}

// Config configures a Reconciler.
type Config struct {
	Node      string
	Store     *checkpoint.Store
	StaticDir string // the kubelet's static pod directory
	VolumeDir string // restored secret/configMap files; tmpfs
	Runtime   Runtime
	API       API
	Boot      *boot.Tracker
	Policy    policy.Policy
	IPAM      IPAM            // optional
	Repair    Repairer        // optional: rebuilds a damaged or lost IPAM store
	Events    Events          // optional
	Lease     *flannel.Keeper // optional
	Contact   *boot.Clock     // the last API contact; nil: unknown (only never-replaced pods are restored)
	Metrics   *metrics.Metrics
	Log       *slog.Logger

	Grace            time.Duration // API unreachable / parent absent for this long before acting
	Stable           time.Duration // API reachable for this long before a copy is removed
	Refresh          time.Duration // re-read secrets/configMaps of unchanged pods this often
	LeakMinAge       time.Duration // allocations younger than this are never treated as leaks
	RestoreTimeout   time.Duration // a copy without a running sandbox after this is reported
	CorruptRetention time.Duration // corrupt checkpoints set aside are deleted after this
	Reservation      string        // reservation annotation for copies whose parent has none
	SkipVolumes      bool          // do not save secret/configMap data; such volumes become emptyDirs
	Now              func() time.Time
	// AfterPass, when set, runs after each pass of Run (the daemon gives
	// the memory the pass freed back to the kernel).
	AfterPass func()
}

// Reconciler runs reconcile passes.
type Reconciler struct {
	cfg Config

	pods map[checkpoint.ID]*memory // per identity; pruned when it leaves
	// node: per daemon-level topic, the last message logged.
	node map[string]string
	// bootUnrecorded: the pods the kubelet knows this boot could not be
	// written; restores are held back until they are.
	bootUnrecorded bool
	wasMissing     map[string]bool // IPAM allocations whose sandbox was missing last pass
	cni            cniState        // the CNI configuration against the store (cniconf.go)

	mu      sync.Mutex // guards lastOK and lastErr (read by Health)
	lastOK  time.Time
	lastErr error
}

// New returns a reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	return &Reconciler{
		cfg:  cfg,
		pods: map[checkpoint.ID]*memory{},
		node: map[string]string{},
	}
}

// Health returns the time of the last pass whose observation succeeded, and
// the error of the last pass that could not observe. Errors about single
// pods never appear here: they are the pod's, not the daemon's.
func (r *Reconciler) Health() (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastOK, r.lastErr
}

// Run runs a pass every interval until ctx is done.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		err := r.Reconcile(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && (last == nil || err.Error() != last.Error()):
			r.cfg.Log.Error("reconcile pass could not observe the node; nothing was changed", "err", err)
		case err == nil && last != nil:
			r.cfg.Log.Info("reconcile passes observe the node again")
		}
		last = err
		if r.cfg.AfterPass != nil {
			r.cfg.AfterPass()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile runs one pass. It returns an error only when the node could not
// be observed (then nothing was changed).
func (r *Reconciler) Reconcile(ctx context.Context) error {
	snap, err := r.observe(ctx)
	r.mu.Lock()
	r.lastErr = err
	if err == nil {
		r.lastOK = r.cfg.Now()
	}
	r.mu.Unlock()
	if err != nil {
		r.cfg.Metrics.ReconcileErrors.Inc()
		return err
	}
	r.reportCorrupt(snap)
	r.track(snap)
	r.nodeRanges(snap)
	r.keepLease(snap)                                  // before restores: a restored copy's ADD needs the lease
	if r.cfg.Repair != nil && r.cfg.Repair.Pass(ctx) { // a flannel network's range needs the lease
		r.observeIPAM(snap) // rebuilt: what was read is gone
	}
	for _, id := range snap.ids() {
		r.pod(ctx, snap, id)
	}
	r.confirmRestores(snap)
	r.reconcileIPAM(snap)
	r.cniConfig(snap)
	r.prune(snap)
	r.pruneCorrupt(snap.now)
	r.gauges(snap)
	r.cfg.Metrics.LastReconcileUTC.Set(float64(snap.now.Unix()))
	r.cfg.Metrics.PassesTotal.Inc()
	return nil
}
