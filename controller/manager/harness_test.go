package manager

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
	"github.com/stickyip/stickyip/controller/api/apitest"
)

// harness runs a controller against client-go's fake clientset (pods,
// Nodes, StatefulSets, Leases, Events, ConfigMaps: the shards and the
// former index) and an in-memory placement API server (records).
type harness struct {
	t    *testing.T
	kube *fake.Clientset
	srv  *apitest.Server
	m    *Manager
	stop context.CancelFunc
	done chan error

	failMu sync.Mutex
	fail   map[string]int // verb on ConfigMaps → HTTP status (failShards)
}

// testConfig is the contract's configuration with times a test can wait
// for.
func testConfig() Config {
	cfg := Defaults()
	cfg.LeaderElect = false
	cfg.ListenAddress = "127.0.0.1:0"
	cfg.PendingFor = 300 * time.Millisecond
	cfg.NodeGrace = 300 * time.Millisecond
	cfg.BatchWindow = 50 * time.Millisecond
	return cfg
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	return &harness{t: t, kube: fake.NewClientset(objs...), srv: apitest.New(t)}
}

// start starts a controller of cfg on the harness's servers.
func (h *harness) start(cfg Config) *Manager {
	h.t.Helper()
	pl, err := api.New(h.srv.Config())
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := New(cfg, Clients{Kube: h.kube, Placement: pl}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.m, h.stop, h.done = m, cancel, make(chan error, 1)
	go func() { h.done <- m.Run(ctx) }()
	h.t.Cleanup(h.halt)
	return m
}

// halt stops the controller and waits for it.
func (h *harness) halt() {
	if h.stop == nil {
		return
	}
	h.stop()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		h.t.Error("the controller did not stop")
	}
	h.stop = nil
}

// ready starts a controller and waits until it has done its first sync.
func (h *harness) ready(cfg Config) *Manager {
	h.t.Helper()
	m := h.start(cfg)
	poll(h.t, "the first index sync", func() bool { return m.firstSynced.Load() })
	return m
}

// poll waits for cond, failing the test after a deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var t0 = time.Now().Add(-time.Hour).Truncate(time.Second)

func node(name string, uid types.UID) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
}

// pod returns pod namespace/name of uid bound to node, created at t0+age.
func pod(namespace, name string, uid types.UID, nodeName string, age time.Duration, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, CreationTimestamp: metav1.NewTime(t0.Add(age))},
		Spec: corev1.PodSpec{NodeName: nodeName}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func annotated(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func ofSet(set string, uid types.UID) func(*corev1.Pod) {
	yes := true
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set, UID: uid, Controller: &yes}}
	}
}

func statefulSet(namespace, name string, uid types.UID, replicas int32, whenScaled, whenDeleted string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, CreationTimestamp: metav1.NewTime(t0)},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenScaled: appsv1.PersistentVolumeClaimRetentionPolicyType(whenScaled), WhenDeleted: appsv1.PersistentVolumeClaimRetentionPolicyType(whenDeleted)}}}
}

// entry is an entry of a running pod (until nil) or of a reservation.
func entry(namespace, identity, podName string, uid types.UID, running bool) placementv1.Entry {
	e := placementv1.Entry{Namespace: namespace, Identity: identity, Pod: podName, PodUID: uid,
		Since: metav1.NewTime(t0.Add(time.Minute)), Addresses: []string{"10.0.0.5"}}
	if !running {
		until := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
		e.Until = &until
	}
	return e
}

func nodeRecord(name string, nodeUID types.UID, entries ...placementv1.Entry) *placementv1.NodeRecord {
	return &placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: placementv1.NodeRecordSpec{NodeUID: nodeUID, Entries: entries}}
}

// claim returns record name's claim of identity (nil: none).
func (h *harness) claim(name, namespace, identity string) *placementv1.Claim {
	r := h.srv.Record(name)
	if r == nil {
		return nil
	}
	for i := range r.Status.Claims {
		if c := &r.Status.Claims[i]; c.Namespace == namespace && c.Identity == identity {
			return c
		}
	}
	return nil
}

// events returns the messages of the ClaimRefused Events on record name.
func (h *harness) events(name string) []string {
	list, err := h.kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == ReasonClaimRefused && e.InvolvedObject.Kind == placementv1.NodeRecordKind && e.InvolvedObject.Name == name {
			out = append(out, e.Message)
		}
	}
	return out
}

// create creates objs in the fake clientset, as the API server would.
func (h *harness) create(objs ...runtime.Object) {
	h.t.Helper()
	for _, o := range objs {
		if err := h.kube.Tracker().Add(o); err != nil {
			h.t.Fatal(fmt.Errorf("%T: %w", o, err))
		}
	}
}

var (
	podsGVR  = corev1.SchemeGroupVersion.WithResource("pods")
	nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")
	setsGVR  = appsv1.SchemeGroupVersion.WithResource("statefulsets")
)

// shards returns namespace's shards: its ConfigMaps of a shard's name.
func (h *harness) shards(namespace string) []corev1.ConfigMap {
	list, err := h.kube.Tracker().List(configMapsGVR, corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []corev1.ConfigMap
	for _, cm := range list.(*corev1.ConfigMapList).Items {
		if _, _, ok := placementv1.ParseShardName(cm.Name); ok {
			out = append(out, cm)
		}
	}
	return out
}

// index returns namespace's index as its shards hold it: identity → node.
func (h *harness) index(namespace string) map[string]string {
	out := map[string]string{}
	for _, cm := range h.shards(namespace) {
		placementv1.MergeShard(out, cm.Labels[placementv1.IndexLabel], cm.Data)
	}
	return out
}

// shardWrites counts the ConfigMap writes of the verbs (create, patch,
// update, delete) the fake clientset took.
func (h *harness) shardWrites(verbs ...string) int {
	n := 0
	for _, a := range h.kube.Actions() {
		if a.GetResource() == configMapsGVR && slices.Contains(verbs, a.GetVerb()) {
			n++
		}
	}
	return n
}

// allWrites counts every write the controller made: records' and shards'.
func (h *harness) allWrites() int {
	return h.srv.AllWrites() + h.shardWrites("create", "patch", "update", "delete")
}

// failShards makes the fake clientset refuse verb on ConfigMaps with code
// (0: take it again).
func (h *harness) failShards(verb string, code int) {
	h.failMu.Lock()
	defer h.failMu.Unlock()
	if h.fail == nil {
		h.fail = map[string]int{}
		h.kube.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
			h.failMu.Lock()
			defer h.failMu.Unlock()
			if c := h.fail[a.GetVerb()]; c != 0 {
				return true, nil, apierrors.NewGenericServerResponse(c, a.GetVerb(), configMapsGVR.GroupResource(), "", "refused by the test", 0, true)
			}
			return false, nil, nil
		})
	}
	h.fail[verb] = code
}

var configMapsGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
