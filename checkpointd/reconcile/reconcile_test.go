package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/contract"
)

// fakeRuntime is a container runtime whose sandboxes the test sets.
type fakeRuntime struct {
	mu        sync.Mutex
	sandboxes []cri.Sandbox
	err       error
}

func (f *fakeRuntime) Sandboxes(context.Context) ([]cri.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]cri.Sandbox(nil), f.sandboxes...), f.err
}

func (f *fakeRuntime) set(s ...cri.Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = s
}

// fakeAPI is an API server the test switches on and off.
type fakeAPI struct {
	mu         sync.Mutex
	pods       map[string]*corev1.Pod
	reachable  bool
	since      time.Time
	secrets    map[string]map[string][]byte
	configMaps map[string]map[string][]byte
	secretGets int
}

func (f *fakeAPI) Pods() ([]*corev1.Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out, true
}

func (f *fakeAPI) Reachable() (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reachable, f.since
}

func (f *fakeAPI) Secret(_ context.Context, ns, name string) (map[string][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.secretGets++
	if !f.reachable {
		return nil, errors.New("connection refused")
	}
	d, ok := f.secrets[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return d, nil
}

func (f *fakeAPI) ConfigMap(_ context.Context, ns, name string) (map[string][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.configMaps[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
	}
	return d, nil
}

func (f *fakeAPI) setReachable(ok bool, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reachable != ok {
		f.reachable, f.since = ok, at
	}
}

func (f *fakeAPI) put(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Namespace+"/"+p.Name] = p
}

func (f *fakeAPI) del(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, ns+"/"+name)
}

// fakeIPAM is an in-memory IPAM store.
type fakeIPAM struct {
	allocs   []Allocation
	released []string // "network/namespace/name"
	deleted  []string // "network/containerID/ifname"
}

func (f *fakeIPAM) Allocations() ([]Allocation, error) {
	return append([]Allocation(nil), f.allocs...), nil
}

func (f *fakeIPAM) ReleaseContainer(network, containerID, ifname string) error {
	f.deleted = append(f.deleted, network+"/"+containerID+"/"+ifname)
	var keep []Allocation
	for _, a := range f.allocs {
		if a.Network == network && a.ContainerID == containerID && a.IfName == ifname && a.State == StateAllocated {
			continue
		}
		keep = append(keep, a)
	}
	f.allocs = keep
	return nil
}

func (f *fakeIPAM) ReleaseReservation(network, ns, name string) error {
	f.released = append(f.released, network+"/"+ns+"/"+name)
	var keep []Allocation
	for _, a := range f.allocs {
		if a.Network == network && a.Namespace == ns && a.Name == name && a.State == StateReserved {
			continue
		}
		keep = append(keep, a)
	}
	f.allocs = keep
	return nil
}

const grace = time.Minute

type harness struct {
	t       *testing.T
	now     time.Time
	rt      *fakeRuntime
	api     *fakeAPI
	ipam    *fakeIPAM
	store   *checkpoint.Store
	static  string
	volumes string
	m       *metrics.Metrics
	r       *Reconciler
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	store, err := checkpoint.New(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t:   t,
		now: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
		rt:  &fakeRuntime{},
		api: &fakeAPI{
			pods:       map[string]*corev1.Pod{},
			secrets:    map[string]map[string][]byte{"default/web-tls": {"key": []byte("SECRET")}},
			configMaps: map[string]map[string][]byte{},
		},
		ipam:    &fakeIPAM{},
		store:   store,
		static:  filepath.Join(dir, "manifests"),
		volumes: filepath.Join(dir, "volumes"),
		m:       metrics.New(),
	}
	h.api.reachable, h.api.since = true, h.now
	h.r = New(Config{
		Node: "node1", Store: store, StaticDir: h.static, VolumeDir: h.volumes,
		Runtime: h.rt, API: h.api, IPAM: h.ipam, Metrics: h.m,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Grace: grace, Refresh: 10 * time.Minute, LeakMinAge: 2 * time.Minute, Reservation: "10m",
		Now: func() time.Time { return h.now },
	})
	return h
}

func (h *harness) pass() {
	h.t.Helper()
	if err := h.r.Reconcile(context.Background()); err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

func (h *harness) staticManifest(id checkpoint.ID) *corev1.Pod {
	h.t.Helper()
	data, err := os.ReadFile(h.r.StaticPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		h.t.Fatalf("static manifest: %v", err)
	}
	return &p
}

func pod(name, uid, image string, optIn bool) *corev1.Pod {
	ann := map[string]string{contract.AnnotationReservedDuration: "5"}
	if optIn {
		ann[contract.AnnotationCheckpoint] = "true"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), Annotations: ann, ResourceVersion: "1"},
		Spec: corev1.PodSpec{
			NodeName:   "node1",
			Containers: []corev1.Container{{Name: "c", Image: image, VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls"}}}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "web-tls", DefaultMode: func() *int32 { m := int32(0o400); return &m }(),
			}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func sandbox(id string, p *corev1.Pod, ready bool) cri.Sandbox {
	return cri.Sandbox{ID: id, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Ready: ready, Annotations: p.Annotations}
}

func copySandbox(id, of string) cri.Sandbox {
	ns, name, _ := strings.Cut(of, "/")
	return cri.Sandbox{ID: id, Namespace: ns, Name: name + "-node1", UID: "static-uid", Ready: true,
		Annotations: map[string]string{contract.AnnotationCheckpointOf: of, contract.AnnotationConfigSource: "file"}}
}

var web = checkpoint.ID{Namespace: "default", Name: "web"}

// TestRestoreAndHandBack walks the main scenario: save, API away, reboot,
// restore after the grace period, API back, hand-back.
func TestRestoreAndHandBack(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)

	// Bound but not running yet: nothing saved.
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("checkpoint before the pod runs: %v", err)
	}

	// Running: saved, with the secret's data.
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	rec, err := h.store.Load(web)
	if err != nil {
		t.Fatalf("checkpoint not saved: %v", err)
	}
	if string(rec.Secrets["web-tls"]["key"]) != "SECRET" || rec.Pod.UID != "uid-1" {
		t.Errorf("record = %+v", rec)
	}
	if got := testutil.ToFloat64(h.m.Checkpoints); got != 1 {
		t.Errorf("checkpoints gauge %v, want 1", got)
	}

	// Spec change of the running pod updates the checkpoint.
	p2 := pod("web", "uid-1", "nginx:2", true)
	h.api.put(p2)
	h.advance(5 * time.Second)
	h.pass()
	rec, _ = h.store.Load(web)
	if rec.Pod.Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("checkpoint image %s after spec change, want nginx:2", rec.Pod.Spec.Containers[0].Image)
	}

	// API server goes away; the pod keeps running: nothing restored.
	h.api.setReachable(false, h.now)
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("restored while the parent still runs")
	}

	// Node "reboots": no sandboxes at all. Within the grace period: nothing.
	h.rt.set()
	h.api.setReachable(true, h.now) // reset the clock: a fresh outage starts now
	h.api.setReachable(false, h.now)
	h.advance(grace / 2)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("restored before the grace period")
	}
	// After the grace period: restored.
	h.advance(grace)
	h.pass()
	sp := h.staticManifest(web)
	if sp == nil {
		t.Fatal("not restored after the grace period")
	}
	if sp.Annotations[contract.AnnotationCheckpointOf] != "default/web" || sp.Annotations[contract.AnnotationReservedDuration] != "5" {
		t.Errorf("static copy annotations %v", sp.Annotations)
	}
	if sp.Spec.Containers[0].Image != "nginx:2" || sp.Spec.NodeName != "" {
		t.Errorf("static copy spec: image %s nodeName %q", sp.Spec.Containers[0].Image, sp.Spec.NodeName)
	}
	keyFile := filepath.Join(h.volumes, "default_web", "tls", "key")
	data, err := os.ReadFile(keyFile)
	if err != nil || string(data) != "SECRET" {
		t.Fatalf("restored secret file: %q, %v", data, err)
	}
	if st, _ := os.Stat(keyFile); st.Mode().Perm() != 0o400 {
		t.Errorf("restored secret mode %v, want the pod's 0400", st.Mode().Perm())
	}
	if st, _ := os.Stat(h.volumes); st.Mode().Perm() != 0o700 {
		t.Errorf("volume dir mode %v, want 0700", st.Mode().Perm())
	}
	if st, _ := os.Stat(h.r.StaticPath(web)); st.Mode().Perm() != 0o600 {
		t.Errorf("manifest mode %v, want 0600", st.Mode().Perm())
	}
	if got := testutil.ToFloat64(h.m.RestoresActive); got != 1 {
		t.Errorf("restores_active %v, want 1", got)
	}

	// The kubelet runs the copy. Passes while the API is away change nothing.
	h.rt.set(copySandbox("sb-copy", "default/web"))
	h.advance(time.Hour)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("static copy removed while the API server is away")
	}

	// API back, parent still bound here: the copy is removed (hand-back),
	// the checkpoint stays.
	h.api.setReachable(true, h.now)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("static copy kept after the API server returned")
	}
	if _, err := os.Stat(filepath.Join(h.volumes, "default_web")); !os.IsNotExist(err) {
		t.Errorf("restored secret files left behind: %v", err)
	}
	if _, err := h.store.Load(web); err != nil {
		t.Errorf("checkpoint lost at hand-back: %v", err)
	}
	if got := testutil.ToFloat64(h.m.HandBacksTotal); got != 1 {
		t.Errorf("handbacks_total %v, want 1", got)
	}
	if len(h.ipam.released) != 0 {
		t.Errorf("reservation released at hand-back: %v", h.ipam.released)
	}
}

// TestParentGoneReleases: a pod deleted through the API loses its checkpoint
// and its reservation after the grace period, not before, and only once the
// static copy's sandbox is gone.
func TestParentGoneReleases(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	if _, err := h.store.Load(web); err != nil {
		t.Fatal(err)
	}

	h.api.del("default", "web")
	h.rt.set()
	h.ipam.allocs = []Allocation{
		{Network: "cbr0", IP: "10.244.1.5", State: StateReserved, Namespace: "default", Name: "web"},
		{Network: "cbr0", IP: "10.244.1.6", State: StateReserved, Namespace: "default", Name: "other"},
	}
	h.pass()
	h.advance(grace - time.Second)
	h.pass()
	if _, err := h.store.Load(web); err != nil {
		t.Fatalf("checkpoint removed before the grace period: %v", err)
	}
	if len(h.ipam.released) != 0 {
		t.Fatalf("released before the grace period: %v", h.ipam.released)
	}
	h.advance(time.Second)
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("checkpoint kept after the grace period: %v", err)
	}
	if strings.Join(h.ipam.released, ",") != "cbr0/default/web" {
		t.Errorf("released %v, want only cbr0/default/web", h.ipam.released)
	}
	if len(h.ipam.allocs) != 1 || h.ipam.allocs[0].Name != "other" {
		t.Errorf("IPAM left with %+v, want only the other pod's reservation", h.ipam.allocs)
	}
}

// TestDeletedWhileAwayNotResurrected: the node restored a copy while cut off;
// the parent was deleted meanwhile. Once the API answers the copy goes at
// once, and after the grace period the checkpoint and reservation too.
func TestDeletedWhileAwayNotResurrected(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()

	h.api.setReachable(false, h.now)
	h.rt.set()
	h.advance(grace)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("not restored")
	}
	h.rt.set(copySandbox("sb-copy", "default/web"))
	h.ipam.allocs = []Allocation{{Network: "cbr0", IP: "10.244.1.5", State: StateAllocated, ContainerID: "sb-copy", IfName: "eth0", Namespace: "default", Name: "web"}}

	h.api.del("default", "web")
	h.api.setReachable(true, h.now)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("copy of a deleted pod kept running after the API answered")
	}
	// The kubelet stops the copy; its DEL turns the IP into a reservation.
	h.rt.set()
	h.ipam.allocs = []Allocation{{Network: "cbr0", IP: "10.244.1.5", State: StateReserved, Namespace: "default", Name: "web"}}
	h.advance(grace)
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("checkpoint kept: %v", err)
	}
	if len(h.ipam.allocs) != 0 {
		t.Errorf("reservation kept: %+v", h.ipam.allocs)
	}
	// And an outage afterwards does not bring it back.
	h.api.setReachable(false, h.now)
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Error("deleted pod resurrected by a later outage")
	}
}

// TestReleaseWaitsForCopySandbox: the reservation is released only after the
// copy's sandbox is gone (its DEL would otherwise re-create it).
func TestReleaseWaitsForCopySandbox(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.del("default", "web")
	h.rt.set(copySandbox("sb-copy", "default/web"))
	h.ipam.allocs = []Allocation{{Network: "cbr0", IP: "10.244.1.5", State: StateReserved, Namespace: "default", Name: "web"}}
	h.pass()
	h.advance(grace)
	h.pass()
	if len(h.ipam.released) != 0 {
		t.Fatalf("released while the copy's sandbox exists: %v", h.ipam.released)
	}
	// Stopped (its DEL done) but not yet removed by the kubelet: enough.
	stopped := copySandbox("sb-copy", "default/web")
	stopped.Ready = false
	h.rt.set(stopped)
	h.advance(5 * time.Second)
	h.pass()
	if strings.Join(h.ipam.released, ",") != "cbr0/default/web" {
		t.Errorf("released %v after the copy stopped, want cbr0/default/web", h.ipam.released)
	}
}

// TestTransientAPIErrorDeletesNothing: whatever the API said last, nothing is
// removed while it cannot be reached.
func TestTransientAPIErrorDeletesNothing(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.del("default", "web")
	h.pass() // the API said: absent
	h.api.setReachable(false, h.now)
	h.advance(10 * grace)
	h.pass()
	if _, err := h.store.Load(web); err != nil {
		t.Errorf("checkpoint deleted while the API server was unreachable: %v", err)
	}
	if len(h.ipam.released) != 0 {
		t.Errorf("reservation released while the API server was unreachable: %v", h.ipam.released)
	}
	if h.staticManifest(web) != nil {
		t.Error("a pod the API last reported gone was restored")
	}
}

func TestNotOptedInNeverSaved(t *testing.T) {
	h := newHarness(t)
	p := pod("plain", "uid-2", "nginx:1", false)
	h.api.put(p)
	h.rt.set(sandbox("sb2", p, true))
	h.pass()
	h.api.setReachable(false, h.now)
	h.rt.set()
	h.advance(2 * grace)
	h.pass()
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Errorf("%d checkpoints for a pod without the opt-in", len(recs))
	}
	if entries, _ := os.ReadDir(h.static); len(entries) != 0 {
		t.Errorf("static manifests for a pod without the opt-in: %v", entries)
	}
}

func TestOtherNodesAndTerminatingPodsIgnored(t *testing.T) {
	h := newHarness(t)
	elsewhere := pod("elsewhere", "u3", "nginx", true)
	elsewhere.Spec.NodeName = "node2"
	done := pod("done", "u4", "nginx", true)
	done.Status.Phase = corev1.PodSucceeded
	dying := pod("dying", "u5", "nginx", true)
	now := metav1.NewTime(h.now)
	dying.DeletionTimestamp = &now
	for _, p := range []*corev1.Pod{elsewhere, done, dying} {
		h.api.put(p)
	}
	h.rt.set(sandbox("a", elsewhere, true), sandbox("b", done, true), sandbox("c", dying, true))
	h.pass()
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Errorf("saved %d checkpoints, want none", len(recs))
	}
}

func TestOldIncarnationNotSaved(t *testing.T) {
	h := newHarness(t)
	h.api.put(pod("web", "uid-new", "nginx:2", true))
	h.rt.set(sandbox("old", pod("web", "uid-old", "nginx:1", true), true))
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("saved although only an older pod of that name runs: %v", err)
	}
}

func TestRuntimeErrorChangesNothing(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.setReachable(false, h.now)
	h.advance(2 * grace)
	h.rt.err = errors.New("connection refused")
	if err := h.r.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("reconcile with the runtime down: %v, want its error", err)
	}
	if h.staticManifest(web) != nil {
		t.Error("restored without knowing what runs locally")
	}
	if got := testutil.ToFloat64(h.m.ReconcileErrors); got != 1 {
		t.Errorf("reconcile_errors_total %v, want 1", got)
	}
	if _, err := h.r.Health(); err == nil {
		t.Error("Health reports no error")
	}
}

func TestCorruptCheckpointNotRestored(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	path := h.store.Path(web)
	data, _ := os.ReadFile(path)
	data[len(data)-3] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	h.api.setReachable(false, h.now)
	h.rt.set()
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Error("corrupt checkpoint restored")
	}
	if got := testutil.ToFloat64(h.m.CorruptTotal); got != 1 {
		t.Errorf("checkpoints_corrupt_total %v, want 1", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.store.Dir(), checkpoint.CorruptDir)); len(entries) != 1 {
		t.Errorf("corrupt file not set aside: %v", entries)
	}
}

func TestSecretsReadOnlyWhenChangedOrDue(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.pass()
	h.pass()
	if h.api.secretGets != 1 {
		t.Errorf("%d secret reads for an unchanged pod, want 1", h.api.secretGets)
	}
	h.api.secrets["default/web-tls"] = map[string][]byte{"key": []byte("ROTATED")}
	h.advance(11 * time.Minute)
	h.pass()
	rec, _ := h.store.Load(web)
	if string(rec.Secrets["web-tls"]["key"]) != "ROTATED" {
		t.Errorf("rotated secret not picked up after the refresh period")
	}
}

func TestUnsupportedPodNotSaved(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("pod with a PVC saved: %v", err)
	}
}

func TestLeakedAllocationsHandledAsDel(t *testing.T) {
	h := newHarness(t)
	old := h.now.Add(-time.Hour)
	h.rt.set(cri.Sandbox{ID: "live", Namespace: "default", Name: "a", Ready: true},
		cri.Sandbox{ID: "stopped", Namespace: "default", Name: "b", Ready: false})
	h.ipam.allocs = []Allocation{
		{Network: "cbr0", IP: "10.244.1.2", State: StateAllocated, ContainerID: "live", IfName: "eth0", AllocatedAt: old},
		{Network: "cbr0", IP: "10.244.1.3", State: StateAllocated, ContainerID: "stopped", IfName: "eth0", AllocatedAt: old},
		{Network: "cbr0", IP: "10.244.1.4", State: StateAllocated, ContainerID: "gone", IfName: "eth0", AllocatedAt: old},
		{Network: "cbr0", IP: "10.244.1.5", State: StateAllocated, ContainerID: "young", IfName: "eth0", AllocatedAt: h.now.Add(-time.Second)},
		{Network: "cbr0", IP: "10.244.1.6", State: StateReserved, Namespace: "default", Name: "r"},
	}
	h.pass()
	if len(h.ipam.deleted) != 0 {
		t.Fatalf("released after one pass: %v (a sandbox must be missing twice)", h.ipam.deleted)
	}
	if got := testutil.ToFloat64(h.m.Allocations.WithLabelValues("cbr0")); got != 4 {
		t.Errorf("ipam_allocations %v, want 4", got)
	}
	if got := testutil.ToFloat64(h.m.Reservations.WithLabelValues("cbr0")); got != 1 {
		t.Errorf("ipam_reservations %v, want 1", got)
	}
	h.advance(5 * time.Second)
	h.pass()
	if strings.Join(h.ipam.deleted, ",") != "cbr0/gone/eth0" {
		t.Errorf("DEL for %v, want only cbr0/gone/eth0", h.ipam.deleted)
	}
	if got := testutil.ToFloat64(h.m.ReconciledLeaks); got != 1 {
		t.Errorf("ipam_reconciled_leaks_total %v, want 1", got)
	}
	// The young one becomes a leak once old enough (and missing twice).
	h.advance(3 * time.Minute)
	h.pass()
	h.pass()
	if strings.Join(h.ipam.deleted, ",") != "cbr0/gone/eth0,cbr0/young/eth0" {
		t.Errorf("DEL for %v, want the young allocation released once old", h.ipam.deleted)
	}
}

func TestLeakCountResetsWhenSandboxReappears(t *testing.T) {
	h := newHarness(t)
	h.ipam.allocs = []Allocation{{Network: "n", IP: "10.0.0.2", State: StateAllocated, ContainerID: "flaky", IfName: "eth0", AllocatedAt: h.now.Add(-time.Hour)}}
	h.pass() // missing once
	h.rt.set(cri.Sandbox{ID: "flaky", Ready: true})
	h.pass() // present again
	h.rt.set()
	h.pass() // missing once more: still only one in a row
	if len(h.ipam.deleted) != 0 {
		t.Errorf("released %v although never missing twice in a row", h.ipam.deleted)
	}
}

func TestStaticPrefixOnlyOurs(t *testing.T) {
	h := newHarness(t)
	if err := os.MkdirAll(h.static, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(h.static, "kube-apiserver.yaml")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.pass()
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a static pod checkpointd did not write was touched: %v", err)
	}
}

// TestFilesRewrittenAfterReboot: the static manifest survives a reboot but the
// tmpfs volume directory does not; checkpointd rewrites the files.
func TestFilesRewrittenAfterReboot(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.setReachable(false, h.now)
	h.rt.set()
	h.advance(grace)
	h.pass()
	keyFile := filepath.Join(h.volumes, "default_web", "tls", "key")
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatal(err)
	}
	// Reboot: /run is empty, a new checkpointd starts, the manifest is still there.
	if err := os.RemoveAll(h.volumes); err != nil {
		t.Fatal(err)
	}
	h.r = New(h.r.cfg)
	h.pass()
	if data, err := os.ReadFile(keyFile); err != nil || string(data) != "SECRET" {
		t.Errorf("secret file after reboot: %q, %v", data, err)
	}
	if h.staticManifest(web) == nil {
		t.Error("static copy lost")
	}
}

// TestDeletedThenRebootedNotRestored: the API said the parent was deleted;
// the node then reboots with the API server away. The new checkpointd
// process must not restore it, and releases it once the API answers.
func TestDeletedThenRebootedNotRestored(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.del("default", "web")
	h.rt.set()
	h.pass() // absence observed and recorded
	deletedAt := h.now

	// Reboot: new process, API away for longer than the grace period.
	h.advance(10 * time.Second)
	h.api.setReachable(false, h.now)
	h.r = New(h.r.cfg)
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("a pod the API had reported deleted was restored after a reboot")
	}
	if _, err := h.store.Load(web); err != nil {
		t.Fatalf("checkpoint deleted while the API server is away: %v", err)
	}
	// The API answers: released at once (absent since deletedAt, > grace ago).
	h.api.setReachable(true, h.now)
	h.pass()
	if _, err := h.store.Load(web); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("checkpoint kept after the API confirmed the deletion %v ago: %v", h.now.Sub(deletedAt), err)
	}
	if _, ok := h.store.AbsentSince(web); ok {
		t.Error("absence mark left after the release")
	}
}

// TestParentBackClearsAbsence: a parent reported gone and then back (e.g.
// re-created on this node) is restorable again.
func TestParentBackClearsAbsence(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	h.api.del("default", "web")
	h.pass()
	if _, ok := h.store.AbsentSince(web); !ok {
		t.Fatal("absence not recorded")
	}
	p2 := pod("web", "uid-2", "nginx:1", true)
	h.api.put(p2)
	h.rt.set(sandbox("sb2", p2, true))
	h.advance(5 * time.Second)
	h.pass()
	if _, ok := h.store.AbsentSince(web); ok {
		t.Error("absence mark kept although the parent is back")
	}
	h.api.setReachable(false, h.now)
	h.rt.set()
	h.r = New(h.r.cfg)
	h.advance(grace)
	h.pass()
	if sp := h.staticManifest(web); sp == nil || sp.Annotations[contract.AnnotationCheckpointUID] != "uid-2" {
		t.Errorf("re-created pod not restored from its own checkpoint: %+v", sp)
	}
}
