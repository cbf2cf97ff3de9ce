// Package reconcile is checkpointd's reconcile loop. Each pass gathers what
// the container runtime, the API server and the local disk say, asks
// state.Decide what to do for every pod identity, and does it; then it
// reconciles the IPAM store with the runtime's sandboxes. A pass is
// idempotent: a step that fails is retried by the next pass.
package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
	"github.com/stickyip/stickyip/checkpointd/state"
	"github.com/stickyip/stickyip/contract"
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
	Secret(ctx context.Context, namespace, name string) (map[string][]byte, error)
	ConfigMap(ctx context.Context, namespace, name string) (map[string][]byte, error)
}

// Allocation is one IPAM store entry (the fields of `stickyip list --json`).
type Allocation struct {
	Network     string    `json:"network"`
	IP          string    `json:"ip"`
	State       string    `json:"state"` // "allocated" or "reserved"
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifname"`
	Namespace   string    `json:"namespace"`
	Name        string    `json:"name"`
	AllocatedAt time.Time `json:"allocatedAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// Allocation states.
const (
	StateAllocated = "allocated"
	StateReserved  = "reserved"
)

// IPAM is the stickyip store as checkpointd uses it.
type IPAM interface {
	// Allocations lists allocations and reservations of every network.
	Allocations() ([]Allocation, error)
	// ReleaseContainer handles the container's allocation as a CNI DEL would
	// (reservation when it has a duration, else freed).
	ReleaseContainer(network, containerID, ifname string) error
	// ReleaseReservation drops the reservations of namespace/name in network.
	ReleaseReservation(network, namespace, name string) error
}

// FreeCounter is implemented by IPAMs that know their pool sizes.
type FreeCounter interface {
	// Free returns the number of free IPs per network.
	Free() (map[string]int, error)
}

// Config configures a Reconciler.
type Config struct {
	Node        string
	Store       *checkpoint.Store
	StaticDir   string // kubelet's static pod directory
	VolumeDir   string // where restored secret/configMap files go
	Runtime     Runtime
	API         API
	IPAM        IPAM // optional
	Metrics     *metrics.Metrics
	Log         *slog.Logger
	Grace       time.Duration // API unreachable / parent absent for this long before acting
	Refresh     time.Duration // re-read secrets/configMaps of unchanged pods this often
	LeakMinAge  time.Duration // allocations younger than this are never treated as leaks
	Reservation string        // reservation annotation for copies whose parent has none
	SkipVolumes bool          // do not save secret/configMap data; such volumes become emptyDirs
	Now         func() time.Time
}

// StaticPrefix starts the file name of every static copy checkpointd writes.
const StaticPrefix = "stickyip-checkpoint-"

// Reconciler runs reconcile passes.
type Reconciler struct {
	cfg Config

	mu          sync.Mutex
	absentSince map[checkpoint.ID]time.Time
	known       map[checkpoint.ID]state.Parent // last word of the API: present or absent
	captured    map[checkpoint.ID]time.Time    // last secret/configMap capture
	releasing   map[checkpoint.ID]bool         // reservation release still to do
	lastWarn    map[checkpoint.ID]string
	missing     map[string]int // allocation key -> consecutive passes its sandbox was missing
	lastOK      time.Time
	lastErr     error
}

// New returns a reconciler.
func New(cfg Config) *Reconciler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	return &Reconciler{
		cfg:         cfg,
		absentSince: map[checkpoint.ID]time.Time{},
		known:       map[checkpoint.ID]state.Parent{},
		captured:    map[checkpoint.ID]time.Time{},
		releasing:   map[checkpoint.ID]bool{},
		lastWarn:    map[checkpoint.ID]string{},
		missing:     map[string]int{},
	}
}

// StaticPath returns the static manifest path of id's copy.
func (r *Reconciler) StaticPath(id checkpoint.ID) string {
	return filepath.Join(r.cfg.StaticDir, StaticPrefix+id.Namespace+"_"+id.Name+".yaml")
}

// Health returns the time of the last successful pass and the last error.
func (r *Reconciler) Health() (time.Time, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastOK, r.lastErr
}

// Run runs a pass every interval until ctx is done.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr error
	for {
		err := r.Reconcile(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && (lastErr == nil || err.Error() != lastErr.Error()):
			r.cfg.Log.Error("reconcile pass failed", "err", err)
		case err != nil:
			r.cfg.Log.Debug("reconcile pass failed again", "err", err)
		case lastErr != nil:
			r.cfg.Log.Info("reconcile pass succeeded again")
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Reconcile runs one pass.
func (r *Reconciler) Reconcile(ctx context.Context) error {
	err := r.reconcile(ctx)
	r.mu.Lock()
	r.lastErr = err
	if err == nil {
		r.lastOK = r.cfg.Now()
	}
	r.mu.Unlock()
	if err != nil {
		r.cfg.Metrics.ReconcileErrors.Inc()
	} else {
		r.cfg.Metrics.LastReconcileUTC.Set(float64(r.cfg.Now().Unix()))
	}
	return err
}

// local is what the runtime says about one identity.
type local struct {
	parentRunning bool // a ready sandbox of the parent (not a copy)
	copyRunning   bool // a ready sandbox of our static copy (its DEL has not happened yet)
}

func (r *Reconciler) reconcile(ctx context.Context) error {
	now := r.cfg.Now()
	log := r.cfg.Log
	m := r.cfg.Metrics

	sandboxes, err := r.cfg.Runtime.Sandboxes(ctx)
	if err != nil {
		// Without the runtime's view nothing can be decided safely.
		return err
	}
	recs, corrupt, err := r.cfg.Store.List()
	if err != nil {
		return err
	}
	for _, c := range corrupt {
		m.CorruptTotal.Inc()
		log.Error("corrupt checkpoint set aside; it will not be restored", "file", c.Path, "movedTo", c.MovedTo, "err", c.Err)
	}
	records := map[checkpoint.ID]*checkpoint.Record{}
	for _, rec := range recs {
		records[rec.ID()] = rec
	}
	statics, err := r.statics()
	if err != nil {
		return err
	}

	reachable, since := r.cfg.API.Reachable()
	pods, synced := r.cfg.API.Pods()
	apiState := state.APIReachable
	switch {
	case reachable && synced:
	case now.Sub(since) >= r.cfg.Grace:
		apiState = state.APIUnreachableForGrace
	default:
		apiState = state.APIUnreachable
	}
	if apiState == state.APIReachable {
		m.APIReachable.Set(1)
	} else {
		m.APIReachable.Set(0)
	}

	parents := map[checkpoint.ID]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != r.cfg.Node || sanitize.IsCopy(p) || !sanitize.OptedIn(p) ||
			p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		parents[checkpoint.ID{Namespace: p.Namespace, Name: p.Name}] = p
	}

	ids := map[checkpoint.ID]bool{}
	for id := range parents {
		ids[id] = true
	}
	for id := range records {
		ids[id] = true
	}
	for id := range statics {
		ids[id] = true
	}

	r.mu.Lock()
	for id := range r.releasing {
		ids[id] = true
	}
	var markErrs []error
	if apiState == state.APIReachable {
		for id := range ids {
			if _, ok := parents[id]; ok {
				if r.known[id] != state.ParentPresent {
					markErrs = append(markErrs, r.cfg.Store.ClearAbsent(id))
				}
				r.known[id] = state.ParentPresent
				delete(r.absentSince, id)
			} else {
				r.known[id] = state.ParentAbsent
				if _, ok := r.absentSince[id]; !ok {
					since, stored := r.cfg.Store.AbsentSince(id)
					if !stored {
						since = now
						markErrs = append(markErrs, r.cfg.Store.MarkAbsent(id, since))
					}
					r.absentSince[id] = since
				}
			}
		}
	}
	r.mu.Unlock()
	if err := errors.Join(markErrs...); err != nil {
		return fmt.Errorf("record parent absence: %w", err)
	}

	locals := map[checkpoint.ID]*local{}
	get := func(id checkpoint.ID) *local {
		if locals[id] == nil {
			locals[id] = &local{}
		}
		return locals[id]
	}
	for _, sb := range sandboxes {
		if of, ok := sb.Annotations[contract.AnnotationCheckpointOf]; ok {
			if id, err := checkpoint.ParseID(of); err == nil && sb.Ready {
				get(id).copyRunning = true
			}
			continue
		}
		if !sb.Ready {
			continue
		}
		id := checkpoint.ID{Namespace: sb.Namespace, Name: sb.Name}
		if p, ok := parents[id]; ok && string(p.UID) != sb.UID {
			continue // an older incarnation: not the pod we would save
		}
		get(id).parentRunning = true
	}

	var errs []error
	sorted := make([]checkpoint.ID, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() })
	for _, id := range sorted {
		in := state.Input{
			API:        apiState,
			Parent:     r.parentState(id, now),
			Running:    get(id).parentRunning,
			Checkpoint: records[id] != nil,
			Static:     statics[id],
		}
		act := state.Decide(in)
		if !act.None() {
			log.Debug("decision", "pod", id.String(), "input", in.String(), "actions", act.String())
		}
		if err := r.apply(ctx, id, in, act, parents[id], records[id]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
		r.finishRelease(id, get(id).copyRunning)
	}

	// Gauges after this pass's actions.
	n := 0
	if recs2, _, err := r.cfg.Store.List(); err == nil {
		n = len(recs2)
	}
	m.Checkpoints.Set(float64(n))
	if st, err := r.statics(); err == nil {
		m.RestoresActive.Set(float64(len(st)))
	}

	if r.cfg.IPAM != nil {
		if err := r.reconcileIPAM(sandboxes, now); err != nil {
			errs = append(errs, fmt.Errorf("IPAM: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) parentState(id checkpoint.ID, now time.Time) state.Parent {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.known[id] {
	case state.ParentPresent:
		return state.ParentPresent
	case state.ParentAbsent:
		if now.Sub(r.absentSince[id]) >= r.cfg.Grace {
			return state.ParentAbsentForGrace
		}
		return state.ParentAbsent
	}
	// Not heard from the API since this process started: a mark left by an
	// earlier run still counts (e.g. the pod was deleted, then the node rebooted).
	if since, ok := r.cfg.Store.AbsentSince(id); ok {
		if now.Sub(since) >= r.cfg.Grace {
			return state.ParentAbsentForGrace
		}
		return state.ParentAbsent
	}
	return state.ParentUnknown
}

// statics lists the static copies present in the static pod directory.
func (r *Reconciler) statics() (map[checkpoint.ID]bool, error) {
	out := map[checkpoint.ID]bool{}
	entries, err := os.ReadDir(r.cfg.StaticDir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read static pod dir: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, StaticPrefix) || !strings.HasSuffix(name, ".yaml") {
			continue
		}
		ns, podName, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(name, StaticPrefix), ".yaml"), "_")
		if ok && ns != "" && podName != "" {
			out[checkpoint.ID{Namespace: ns, Name: podName}] = true
		}
	}
	return out, nil
}

func (r *Reconciler) apply(ctx context.Context, id checkpoint.ID, in state.Input, act state.Actions, parent *corev1.Pod, rec *checkpoint.Record) error {
	log := r.cfg.Log.With("pod", id.String())
	var errs []error
	if act.Release {
		if err := r.removeStatic(id); err != nil {
			return err
		}
		if in.Static {
			log.Info("parent gone from the API for the grace period: static copy removed")
		}
		if err := r.cfg.Store.Remove(id); err != nil {
			return err
		}
		r.mu.Lock()
		r.releasing[id] = true
		delete(r.captured, id)
		r.mu.Unlock()
		r.cfg.Metrics.ReleasesTotal.Inc()
		log.Info("parent gone from the API for the grace period: checkpoint deleted, reservation to be released")
		return nil
	}
	if act.RemoveStatic {
		if err := r.removeStatic(id); err != nil {
			errs = append(errs, err)
		} else {
			r.cfg.Metrics.HandBacksTotal.Inc()
			switch {
			case in.Running:
				log.Info("static copy removed: the parent pod runs on the node again")
			case in.Parent == state.ParentPresent:
				log.Info("static copy removed: API server reachable, parent bound here; handing the pod and its IP back")
			default:
				log.Info("static copy removed: API server reachable and the parent is not bound here (deleted or moved); not resurrecting it", "parent", in.Parent.String())
			}
		}
	}
	if act.Save && parent != nil {
		if err := r.save(ctx, id, parent, rec); err != nil {
			errs = append(errs, fmt.Errorf("save: %w", err))
		}
	}
	if in.Static && !act.RemoveStatic && rec != nil {
		// The copy stays: its files must exist (after a reboot VolumeDir, on
		// tmpfs, is empty while the manifest survived).
		if err := r.ensureFiles(id, rec); err != nil {
			errs = append(errs, fmt.Errorf("restore files: %w", err))
		}
	}
	if act.Restore && rec != nil {
		if err := r.restore(id, rec); err != nil {
			errs = append(errs, fmt.Errorf("restore: %w", err))
		} else {
			r.cfg.Metrics.RestoresTotal.Inc()
			log.Info("API server unreachable for the grace period and pod not running: static copy restored", "manifest", r.StaticPath(id))
		}
	}
	return errors.Join(errs...)
}

// finishRelease releases the parent's reservations once no sandbox of the copy
// is ready any more: a running copy's DEL (at sandbox stop) would re-create
// the reservation; a stopped sandbox has had its DEL.
func (r *Reconciler) finishRelease(id checkpoint.ID, copyRunning bool) {
	r.mu.Lock()
	pending := r.releasing[id]
	r.mu.Unlock()
	if !pending || copyRunning {
		return
	}
	if r.cfg.IPAM != nil {
		allocs, err := r.cfg.IPAM.Allocations()
		if err != nil {
			r.cfg.Log.Warn("cannot list IPAM state to release reservation; will retry", "pod", id.String(), "err", err)
			return
		}
		nets := map[string]bool{}
		for _, a := range allocs {
			if a.State == StateReserved && a.Namespace == id.Namespace && a.Name == id.Name {
				nets[a.Network] = true
			}
		}
		for net := range nets {
			if err := r.cfg.IPAM.ReleaseReservation(net, id.Namespace, id.Name); err != nil {
				r.cfg.Log.Warn("releasing reservation failed; will retry", "pod", id.String(), "network", net, "err", err)
				return
			}
			r.cfg.Log.Info("reservation released: parent gone for good", "pod", id.String(), "network", net)
		}
	}
	if err := r.cfg.Store.ClearAbsent(id); err != nil {
		r.cfg.Log.Warn("cannot clear the parent's absence mark; will retry", "pod", id.String(), "err", err)
		return
	}
	r.mu.Lock()
	delete(r.releasing, id)
	delete(r.known, id)
	delete(r.absentSince, id)
	delete(r.lastWarn, id)
	r.mu.Unlock()
}

func (r *Reconciler) removeStatic(id checkpoint.ID) error {
	p := r.StaticPath(id)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove static copy: %w", err)
	}
	if err := checkpoint.SyncDir(r.cfg.StaticDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if r.cfg.VolumeDir != "" {
		if err := os.RemoveAll(filepath.Join(r.cfg.VolumeDir, sanitize.VolumeRoot(id))); err != nil {
			return fmt.Errorf("remove restored volume files: %w", err)
		}
	}
	return nil
}

// stripPod keeps what a checkpoint needs: identity, labels, annotations, spec.
func stripPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			Labels: p.Labels, Annotations: p.Annotations,
		},
		Spec: *p.Spec.DeepCopy(),
	}
}

func samePod(a, b *corev1.Pod) bool {
	aj, err1 := json.Marshal(a)
	bj, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(aj, bj)
}

func (r *Reconciler) save(ctx context.Context, id checkpoint.ID, parent *corev1.Pod, old *checkpoint.Record) error {
	now := r.cfg.Now()
	pod := stripPod(parent)
	r.mu.Lock()
	last, captured := r.captured[id]
	r.mu.Unlock()
	if old != nil && samePod(old.Pod, pod) && captured && now.Sub(last) < r.cfg.Refresh {
		return nil
	}
	rec := &checkpoint.Record{Pod: pod}
	if err := r.capture(ctx, rec); err != nil {
		return err
	}
	if r.cfg.SkipVolumes {
		dropVolumeData(rec.Pod)
	}
	res, err := sanitize.Manifest(rec, sanitize.Options{VolumeDir: r.cfg.VolumeDir, Reservation: r.cfg.Reservation})
	if err != nil {
		r.warnOnce(id, "pod will not be checkpointed", err.Error())
		return nil
	}
	if len(res.Warnings) > 0 {
		r.warnOnce(id, "checkpoint saved with changes", strings.Join(res.Warnings, "; "))
	}
	written, err := r.cfg.Store.Save(rec)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.captured[id] = now
	r.mu.Unlock()
	if written {
		r.cfg.Metrics.SavesTotal.Inc()
		r.cfg.Log.Info("checkpoint saved", "pod", id.String(), "uid", string(pod.UID), "file", r.cfg.Store.Path(id))
	}
	return nil
}

func (r *Reconciler) warnOnce(id checkpoint.ID, msg, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastWarn[id] == msg+detail {
		return
	}
	r.lastWarn[id] = msg + detail
	r.cfg.Log.Warn(msg, "pod", id.String(), "detail", detail)
}

// dropVolumeData turns secret and configMap volumes into emptyDirs (for
// --volumes=drop, where checkpointd has no access to them).
func dropVolumeData(p *corev1.Pod) {
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		if v.Secret != nil || v.ConfigMap != nil || (v.Projected != nil && !projectsToken(v.Projected)) {
			v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			c := &list[i]
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil) {
					continue
				}
				env = append(env, e)
			}
			c.Env, c.EnvFrom = env, nil
		}
	}
}

func projectsToken(p *corev1.ProjectedVolumeSource) bool {
	for _, s := range p.Sources {
		if s.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// capture fetches the secrets and configMaps the pod references.
func (r *Reconciler) capture(ctx context.Context, rec *checkpoint.Record) error {
	if r.cfg.SkipVolumes {
		return nil
	}
	pod := rec.Pod
	secrets, cms := sanitize.References(pod)
	for _, name := range secrets {
		data, err := r.cfg.API.Secret(ctx, pod.Namespace, name)
		if err != nil {
			if isNotFound(err) && sanitize.Optional(pod, "Secret", name) {
				continue
			}
			return fmt.Errorf("read secret %s/%s: %w", pod.Namespace, name, err)
		}
		if rec.Secrets == nil {
			rec.Secrets = map[string]map[string][]byte{}
		}
		rec.Secrets[name] = data
	}
	for _, name := range cms {
		data, err := r.cfg.API.ConfigMap(ctx, pod.Namespace, name)
		if err != nil {
			if isNotFound(err) && sanitize.Optional(pod, "ConfigMap", name) {
				continue
			}
			return fmt.Errorf("read configMap %s/%s: %w", pod.Namespace, name, err)
		}
		if rec.ConfigMaps == nil {
			rec.ConfigMaps = map[string]map[string][]byte{}
		}
		rec.ConfigMaps[name] = data
	}
	return nil
}

func (r *Reconciler) restore(id checkpoint.ID, rec *checkpoint.Record) error {
	res, err := sanitize.Manifest(rec, sanitize.Options{VolumeDir: r.cfg.VolumeDir, Reservation: r.cfg.Reservation})
	if err != nil {
		return err
	}
	if err := writeFiles(r.cfg.VolumeDir, sanitize.VolumeRoot(id), res); err != nil {
		return err
	}
	data, err := sanitize.Marshal(res.Pod)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.cfg.StaticDir, 0o755); err != nil {
		return err
	}
	return checkpoint.WriteFileAtomic(r.StaticPath(id), data, 0o600)
}

// ensureFiles rewrites the copy's volume files when their directory is missing.
func (r *Reconciler) ensureFiles(id checkpoint.ID, rec *checkpoint.Record) error {
	base := filepath.Join(r.cfg.VolumeDir, sanitize.VolumeRoot(id))
	if _, err := os.Stat(base); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	res, err := sanitize.Manifest(rec, sanitize.Options{VolumeDir: r.cfg.VolumeDir, Reservation: r.cfg.Reservation})
	if err != nil {
		return err
	}
	if len(res.Files) == 0 && !hasHostPathUnder(res.Pod, base) {
		return nil
	}
	r.cfg.Log.Info("static copy present but its volume files are missing (reboot?): rewriting them", "pod", id.String())
	return writeFiles(r.cfg.VolumeDir, sanitize.VolumeRoot(id), res)
}

func hasHostPathUnder(p *corev1.Pod, base string) bool {
	for _, v := range p.Spec.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, base+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// writeFiles materializes the copy's secret/configMap files. VolumeDir itself
// is 0700 (only root reaches the files from the host); each volume directory
// is 0755 so the container sees what the kubelet would show it; file modes
// and groups are those sanitize computed.
func writeFiles(volumeDir, root string, res *sanitize.Result) error {
	if err := os.MkdirAll(volumeDir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(volumeDir, 0o700); err != nil {
		return err
	}
	base := filepath.Join(volumeDir, root)
	if err := os.RemoveAll(base); err != nil {
		return err
	}
	// Every hostPath volume directory must exist, even when it has no files.
	for _, v := range res.Pod.Spec.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, base+string(filepath.Separator)) {
			if err := os.MkdirAll(v.HostPath.Path, 0o755); err != nil {
				return err
			}
		}
	}
	for _, f := range res.Files {
		p := filepath.Join(volumeDir, filepath.FromSlash(f.Path))
		if !strings.HasPrefix(p, base+string(filepath.Separator)) {
			return fmt.Errorf("file %q escapes the volume directory", f.Path)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := checkpoint.WriteFileAtomic(p, f.Data, os.FileMode(f.Mode)); err != nil {
			return err
		}
		if f.GID != nil {
			if err := os.Lchown(p, -1, int(*f.GID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// reconcileIPAM handles allocations whose sandbox no longer exists as DEL and
// updates the IPAM gauges. An allocation is a leak only when it is older than
// LeakMinAge (a sandbox being created is not listed yet while its ADD runs)
// and its sandbox was missing in two passes in a row.
func (r *Reconciler) reconcileIPAM(sandboxes []cri.Sandbox, now time.Time) error {
	allocs, err := r.cfg.IPAM.Allocations()
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	for _, sb := range sandboxes {
		exists[sb.ID] = true
	}
	allocated, reserved := map[string]int{}, map[string]int{}
	seen := map[string]bool{}
	var errs []error
	for _, a := range allocs {
		switch a.State {
		case StateReserved:
			reserved[a.Network]++
			continue
		case StateAllocated:
			allocated[a.Network]++
		default:
			continue
		}
		key := a.Network + "\x00" + a.ContainerID + "\x00" + a.IfName
		if a.ContainerID == "" || exists[a.ContainerID] {
			continue
		}
		if !a.AllocatedAt.IsZero() && now.Sub(a.AllocatedAt) < r.cfg.LeakMinAge {
			continue
		}
		seen[key] = true
		r.missing[key]++
		if r.missing[key] < 2 {
			continue
		}
		if err := r.cfg.IPAM.ReleaseContainer(a.Network, a.ContainerID, a.IfName); err != nil {
			errs = append(errs, fmt.Errorf("release leaked allocation %s (%s): %w", a.IP, a.ContainerID, err))
			continue
		}
		delete(r.missing, key)
		r.cfg.Metrics.ReconciledLeaks.Inc()
		r.cfg.Log.Info("allocation without sandbox handled as DEL", "network", a.Network, "ip", a.IP,
			"containerID", a.ContainerID, "pod", a.Namespace+"/"+a.Name)
	}
	for key := range r.missing {
		if !seen[key] {
			delete(r.missing, key)
		}
	}
	m := r.cfg.Metrics
	m.Allocations.Reset()
	m.Reservations.Reset()
	for n, c := range allocated {
		m.Allocations.WithLabelValues(n).Set(float64(c))
	}
	for n, c := range reserved {
		m.Reservations.WithLabelValues(n).Set(float64(c))
	}
	if fc, ok := r.cfg.IPAM.(FreeCounter); ok {
		if free, err := fc.Free(); err == nil {
			m.FreeIPs.Reset()
			for n, c := range free {
				m.FreeIPs.WithLabelValues(n).Set(float64(c))
			}
		}
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
