package reconcile

import (
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// fakeRuntime is a container runtime whose sandboxes the test sets.
type fakeRuntime struct {
	mu        sync.Mutex
	sandboxes []cri.Sandbox
	err       error
	lists     int // Sandboxes calls
}

func (f *fakeRuntime) Sandboxes(context.Context) ([]cri.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return append([]cri.Sandbox(nil), f.sandboxes...), f.err
}

func (f *fakeRuntime) set(s ...cri.Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = s
}

// fakeAPI is an API server the test switches on and off.
type fakeAPI struct {
	mu        sync.Mutex
	pods      map[string]*corev1.Pod
	reachable bool
	since     time.Time
	objects   map[string]map[string][]byte // "Kind/ns/name"
	gets      map[string]int               // reads per kind
	rv        int                          // the last resourceVersion given
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

func (f *fakeAPI) Object(_ context.Context, kind, ns, name string) (map[string][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets[kind]++
	if !f.reachable {
		return nil, errors.New("connection refused")
	}
	d, ok := f.objects[kind+"/"+ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource(strings.ToLower(kind)+"s"), name)
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

// put stores p as the API server does: with a resourceVersion of its
// own, changed by every write.
func (f *fakeAPI) put(p *corev1.Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	p.ResourceVersion = strconv.Itoa(f.rv)
	f.pods[p.Namespace+"/"+p.Name] = p
}

func (f *fakeAPI) del(ns, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, ns+"/"+name)
}

// fakeIPAM is an in-memory IPAM store.
type fakeIPAM struct {
	entries []reservation.Entry
	deleted []string // "network/containerID/ifname"
	// alive: containers whose network namespace still exists (the engine
	// keeps their allocations).
	alive    map[string]bool
	observes int
}

// Observe reads the fake store: its records, no CNI config dir; observes
// counts the reads.
func (f *fakeIPAM) Observe() (*ipamstore.View, error) {
	f.observes++
	seen := map[string]bool{}
	v := &ipamstore.View{Entries: append([]reservation.Entry(nil), f.entries...)}
	for _, e := range f.entries {
		if !seen[e.Network] {
			seen[e.Network] = true
			v.Networks = append(v.Networks, e.Network)
		}
	}
	return v, nil
}

func (f *fakeIPAM) ReleaseIn(_ *ipamstore.View, network, containerID, ifname string) (bool, error) {
	if f.alive[containerID] {
		return false, nil
	}
	f.deleted = append(f.deleted, network+"/"+containerID+"/"+ifname)
	var keep []reservation.Entry
	for _, e := range f.entries {
		if e.Network == network && e.ContainerID == containerID && e.IfName == ifname && e.State == reservation.Allocated {
			continue
		}
		keep = append(keep, e)
	}
	f.entries = keep
	return true, nil
}

func entry(network, ip string, state reservation.State, cid, pod string, at time.Time) reservation.Entry {
	ns, name, _ := strings.Cut(pod, "/")
	return reservation.Entry{Network: network, Record: &reservation.Record{IP: netip.MustParseAddr(ip), State: state, ContainerID: cid, IfName: "eth0",
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, AllocatedAt: at}}
}

// timed sets the expiry of a reserved or cooling entry.
func timed(e reservation.Entry, expires time.Time) reservation.Entry {
	e.ExpiresAt = expires
	if e.State == reservation.Cooling {
		e.Identity, e.ContainerID = reservation.Identity{}, ""
	}
	return e
}

// fakeEvents records the Events posted.
type fakeEvents struct{ posted []string } // "ns/name reason: message"

func (f *fakeEvents) Event(p *corev1.Pod, _, reason, msg string) {
	f.posted = append(f.posted, p.Namespace+"/"+p.Name+" "+reason+": "+msg)
}

func (f *fakeEvents) with(reason string) []string {
	var out []string
	for _, e := range f.posted {
		if strings.Contains(e, " "+reason+": ") {
			out = append(out, e)
		}
	}
	return out
}

const (
	grace  = time.Minute
	stable = 30 * time.Second
)

type harness struct {
	t       testing.TB
	now     time.Time
	rt      *fakeRuntime
	api     *fakeAPI
	ipam    *fakeIPAM
	events  *fakeEvents
	store   *checkpoint.Store
	static  string
	volumes string // tmpfs on a real node: reboot empties it
	m       *metrics.Metrics
	cfg     Config
	r       *Reconciler
}

func newHarness(t testing.TB) *harness {
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
			pods:    map[string]*corev1.Pod{},
			objects: map[string]map[string][]byte{"Secret/default/web-tls": {"key": []byte("SECRET"), "unused": []byte("NOT-MOUNTED")}},
			gets:    map[string]int{},
		},
		ipam:    &fakeIPAM{},
		events:  &fakeEvents{},
		store:   store,
		static:  filepath.Join(dir, "manifests"),
		volumes: filepath.Join(dir, "run", "checkpointd"),
		m:       metrics.New(),
	}
	h.api.reachable, h.api.since = true, h.now.Add(-time.Hour)
	store.WithClock(func() time.Time { return h.now })
	pol, err := policy.Parse("default,kube-system", "")
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = Config{
		Node: "node1", Store: store, StaticDir: h.static, VolumeDir: h.volumes,
		Runtime: h.rt, API: h.api, Policy: pol, IPAM: h.ipam, Events: h.events, Metrics: h.m,
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Grace: grace, Stable: stable, Refresh: 10 * time.Minute, LeakMinAge: 2 * time.Minute,
		RestoreTimeout: 2 * time.Minute, CorruptRetention: 7 * 24 * time.Hour, Reservation: "10m",
		Now: func() time.Time { return h.now },
	}
	h.start()
	return h
}

// start starts a checkpointd process (the boot tracker is read from the run dir).
func (h *harness) start() {
	h.t.Helper()
	tr, err := boot.Open(h.volumes, "kernel-boot")
	if err != nil {
		h.t.Fatal(err)
	}
	h.cfg.Boot = tr
	// The last API contact is read from the checkpoint directory, as the daemon does.
	if h.cfg.Contact, err = boot.OpenClock(h.store.Dir()); err != nil {
		h.t.Fatal(err)
	}
	h.r = New(h.cfg)
	// A new process's API client starts unreachable and sees any change now.
	h.api.since = h.now
}

// reboot: the power goes; /run (tmpfs) is empty, nothing runs; a new
// checkpointd starts with the API server away. The disk survives.
func (h *harness) reboot() {
	h.t.Helper()
	if err := os.RemoveAll(filepath.Dir(h.volumes)); err != nil {
		h.t.Fatal(err)
	}
	h.rt.set()
	h.api.reachable = false
	h.advance(10 * time.Second)
	h.start()
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
	data, err := os.ReadFile(copyPath(h.static, id))
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

func (h *harness) saved(id checkpoint.ID) *checkpoint.Record {
	h.t.Helper()
	rec, err := h.store.Load(id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return rec
}

func pod(name, uid, image string, optIn bool) *corev1.Pod {
	ann := map[string]string{contract.AnnotationReservedDuration: "5"}
	if optIn {
		ann[contract.AnnotationCheckpoint] = "true"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid), Annotations: ann, ResourceVersion: "1"},
		Spec: corev1.PodSpec{
			NodeName:      "node1",
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: image, VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls"}}}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "web-tls", DefaultMode: func() *int32 { m := int32(0o400); return &m }(),
				Items: []corev1.KeyToPath{{Key: "key", Path: "key"}},
			}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func sandbox(id string, p *corev1.Pod, ready bool) cri.Sandbox {
	return cri.Sandbox{ID: id, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Ready: ready, Annotations: p.Annotations}
}

func copySandbox(id, of string, ready bool) cri.Sandbox {
	ns, name, _ := strings.Cut(of, "/")
	return cri.Sandbox{ID: id, Namespace: ns, Name: name + "-node1", UID: "static-uid", Ready: ready,
		Annotations: map[string]string{contract.AnnotationCheckpointOf: of, contract.AnnotationConfigSource: "file"}}
}

var web = checkpoint.ID{Namespace: "default", Name: "web"}

// running puts p in the API and runs it; one pass saves it.
func (h *harness) running(p *corev1.Pod) {
	h.t.Helper()
	h.api.put(p)
	h.rt.set(sandbox("sb-"+p.Name, p, true))
	h.pass()
}

// sampleCount returns the number of observations of h.
func sampleCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		panic(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// testutilValue is the allocations gauge of network.
func testutilValue(h *harness, network string) float64 {
	return testutil.ToFloat64(h.m.Allocations.WithLabelValues(network))
}
