package manager

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
	"github.com/stickyip/stickyip/controller/facts"
)

// The controller's cost at 5,000 nodes: 150,000 pods (30 a node, in 1,000
// namespaces, each a StatefulSet's), 5,000 records of 30 entries. Run with
// make bench-controller.
const (
	benchNodes      = 5000
	benchPerNode    = 30
	benchNamespaces = 1000
	// benchIdleSets are StatefulSets no node runs a pod of (the cluster's
	// other workloads): 20,000 StatefulSets in all.
	benchIdleSets = 15000
	// benchEvents is how many watch events each event figure is the
	// average of.
	benchEvents = 1000
)

// benchPod is a pod as the API server sends it: labels, annotations,
// managed fields, a container, a status; what the informer keeps of it is
// facts.Pod.
func benchPod(n, i int) *corev1.Pod {
	yes := true
	k := n*benchPerNode + i
	ns, set := fmt.Sprintf("ns-%04d", k%benchNamespaces), fmt.Sprintf("db%03d", (k/benchNamespaces)%5)
	name := fmt.Sprintf("%s-%d", set, k/(benchNamespaces*5))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", k)),
			ResourceVersion: "123456789", CreationTimestamp: metav1.NewTime(t0),
			Labels:      map[string]string{"app": set, "controller-revision-hash": set + "-5d8f7c9b6", "statefulset.kubernetes.io/pod-name": name},
			Annotations: map[string]string{"io.kubernetes.cri/reserved-ip-duration": "30", "kubectl.kubernetes.io/restartedAt": "2026-11-30T10:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set,
				UID: types.UID("set-" + ns + "-" + set), Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update"}, {Manager: "kubelet", Operation: "Update", Subresource: "status"}}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%04d", n), Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1.2.3",
			Env: []corev1.EnvVar{{Name: "MODE", Value: "replica"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "db", Ready: true, Image: "registry.example/db:1.2.3", ImageID: "sha256:0123456789abcdef"}}},
	}
}

func benchManager(b *testing.B) *Manager {
	pl, err := api.New(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig()
	cfg.ImportFormerIndex = false
	m, err := New(cfg, Clients{Kube: fake.NewClientset(), Placement: pl}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.events.stop)
	return m
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cacheBytes is what the informers' caches hold, in bytes of heap.
type cacheBytes struct{ pods, sets, nodes uint64 }

// fillCaches puts what the informers would hold into m's caches: the
// facts of 150,000 pods, 20,000 StatefulSets (5,000 of them the pods'),
// 5,000 Nodes; it returns the heap each took.
func fillCaches(b *testing.B, m *Manager) (c cacheBytes) {
	before := heap()
	for n := range benchNodes {
		for i := range benchPerNode {
			p, _ := facts.Transform(benchPod(n, i))
			if err := m.pods.GetIndexer().Add(p); err != nil {
				b.Fatal(err)
			}
			m.podChanged(p) // what the informer's handler does
		}
	}
	c.pods = heap() - before
	before = heap()
	for k := range benchNamespaces*5 + benchIdleSets {
		o, _ := facts.Transform(benchSet(k))
		_ = m.sets.GetIndexer().Add(o)
	}
	c.sets = heap() - before
	before = heap()
	for n := range benchNodes {
		o, _ := facts.Transform(benchNode(n))
		_ = m.nodes.GetIndexer().Add(o)
	}
	c.nodes = heap() - before
	return c
}

// benchSet is the k-th StatefulSet as the API server sends it: the first
// 5,000 are the pods' (db000 … db004 of each namespace), the rest run on
// no node. Its template, annotations and status are what a watch event
// carries; the cache keeps facts.StatefulSet.
func benchSet(k int) *appsv1.StatefulSet {
	ns, name := fmt.Sprintf("ns-%04d", k%benchNamespaces), fmt.Sprintf("db%03d", k/benchNamespaces)
	s := statefulSet(ns, name, types.UID("set-"+ns+"-"+name), 40, "Retain", "Delete")
	s.ResourceVersion, s.Generation = "123456789", 3
	s.Labels = map[string]string{"app": name}
	s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1500)}
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: "Apply"}, {Manager: "kube-controller-manager", Operation: "Update", Subresource: "status"}}
	s.Spec.ServiceName, s.Spec.Selector = name, &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	s.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name},
		Annotations: map[string]string{"io.kubernetes.cri/reserved-ip-duration": "30"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1.2.3",
			Env: []corev1.EnvVar{{Name: "MODE", Value: "replica"}}, Ports: []corev1.ContainerPort{{ContainerPort: 5432}}}}}}
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 40, ReadyReplicas: 40, CurrentReplicas: 40, UpdatedReplicas: 40,
		AvailableReplicas: 40, CurrentRevision: name + "-5d8f7c9b6", UpdateRevision: name + "-5d8f7c9b6"}
	return s
}

// benchNode is node n as the API server sends it (what the cache keeps is
// facts.Node: its name and UID).
func benchNode(n int) *corev1.Node {
	nd := node(fmt.Sprintf("node-%04d", n), types.UID(fmt.Sprintf("node-uid-%04d", n)))
	nd.Labels = map[string]string{"kubernetes.io/hostname": nd.Name, "node.kubernetes.io/instance-type": "m5.large"}
	nd.Status = corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}
	return nd
}

// benchRecord is node n's record, as its node writes it.
func benchRecord(n int) *placementv1.NodeRecord {
	r := nodeRecord(fmt.Sprintf("node-%04d", n), types.UID(fmt.Sprintf("node-uid-%04d", n)))
	r.Generation, r.ResourceVersion = 1, "1"
	for i := range benchPerNode {
		p := benchPod(n, i)
		r.Spec.Entries = append(r.Spec.Entries, entry(p.Namespace, p.Name, p.Name, p.UID, true))
	}
	return r
}

// BenchmarkController prints the controller's cost at 5,000 nodes: the
// memory of its caches per pod, per StatefulSet, per Node and per record
// entry; the CPU of a claim verified (its pod and StatefulSet looked up and
// checked, from scratch), of a rebuild of every namespace's index, and of
// what the cluster's churn costs it: a pod's watch event (decoded as its
// client receives it, kept, its record queued) and the pass that judges
// that record again, a StatefulSet's event for a set no node runs and for
// one whose pods 30 records claim.
func BenchmarkController(b *testing.B) {
	m := benchManager(b)
	cached := fillCaches(b, m)
	before := heap()
	ctx := context.Background()
	now := time.Now()
	for n := range benchNodes {
		if err := m.records.GetIndexer().Add(benchRecord(n)); err != nil {
			b.Fatal(err)
		}
	}
	for n := range benchNodes {
		j, _ := m.judge(ctx, fmt.Sprintf("node-%04d", n), now)
		r := j.record.DeepCopy()
		r.Status = *j.status // the status the controller writes comes back in the cache
		_ = m.records.GetIndexer().Update(r)
	}
	entries := benchNodes * benchPerNode
	entryBytes := heap() - before
	runtime.KeepAlive(m)

	fresh := make([]*placementv1.NodeRecord, 200)
	for n := range fresh {
		fresh[n] = benchRecord(n) // no status: every pod checked from scratch
	}
	judged := benchTime(func() {
		for _, r := range fresh {
			_ = m.records.GetIndexer().Update(r)
			m.judge(ctx, r.Name, now)
		}
	}) / time.Duration(len(fresh)*benchPerNode)
	for _, r := range fresh { // their status back, as after their pass
		j, _ := m.judge(ctx, r.Name, now)
		c := j.record.DeepCopy()
		c.Status = *j.status
		_ = m.records.GetIndexer().Update(c)
	}
	namespaces := make([]string, 0, len(m.st.cands))
	for ns := range m.st.cands {
		namespaces = append(namespaces, ns)
	}
	rebuild := func() (writes int) {
		for _, ns := range namespaces {
			w, _ := m.plan(ns, m.st.want(ns))
			writes += len(w)
		}
		return writes
	}
	fromNothing := benchTime(func() { rebuild() })
	fillShards(b, m, namespaces)
	unchanged := benchTime(func() {
		if w := rebuild(); w != 0 {
			b.Fatalf("%d writes to an index that holds what it should", w)
		}
	})
	ev := measureEvents(b, m, now)
	b.ReportMetric(float64(cached.pods)/float64(benchNodes*benchPerNode), "B/pod")
	b.ReportMetric(float64(entryBytes)/float64(entries), "B/entry")
	b.ReportMetric(float64(judged.Nanoseconds()), "ns/claim")
	b.ReportMetric(float64(unchanged.Milliseconds()), "ms/rebuild")
	b.ReportMetric(float64(ev.pod.Nanoseconds()), "ns/pod-event")
	b.ReportMetric(float64(ev.rejudge.Nanoseconds()), "ns/record-rejudged")
	b.ReportMetric(float64(ev.idleSet.Nanoseconds()), "ns/idle-set-event")
	b.ReportMetric(float64(ev.followedSet.Nanoseconds()), "ns/followed-set-event")
	sets := benchNamespaces*5 + benchIdleSets
	fmt.Printf("stickyip-controller at %d nodes:\n"+
		"  %d pods cached in %.1f MiB (%d B/pod)\n"+
		"  %d StatefulSets (%d of them no node runs) cached in %.1f MiB (%d B/set); %d Nodes in %.1f MiB (%d B/node)\n"+
		"  %d record entries (records with their status, claims, candidates, index) in %.1f MiB (%d B/entry)\n"+
		"  caches in all: %.1f MiB\n"+
		"  a claim verified (pod, StatefulSet, retention) in %v\n"+
		"  every namespace's index (%d namespaces, %d identities) planned in %v against its shards, %v from no shards\n"+
		"  a pod's watch event (protobuf decoded, kept, its record queued) in %v; its record (%d claims, none changed) judged again in %v\n"+
		"  a StatefulSet's watch event in %v when no node runs it; in %v when %d records claim its pods (each judged again)\n",
		benchNodes, benchNodes*benchPerNode, mib(cached.pods), cached.pods/uint64(benchNodes*benchPerNode),
		sets, benchIdleSets, mib(cached.sets), cached.sets/uint64(sets), benchNodes, mib(cached.nodes), cached.nodes/uint64(benchNodes),
		entries, mib(entryBytes), entryBytes/uint64(entries),
		mib(cached.pods+cached.sets+cached.nodes+entryBytes),
		judged, len(namespaces), entries, unchanged, fromNothing,
		ev.pod, benchPerNode, ev.rejudge, ev.idleSet, ev.followedSet, ev.followers)
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }

// eventCost is the CPU of one watch event, and of the pass it causes.
type eventCost struct {
	pod, rejudge, idleSet, followedSet time.Duration
	followers                          int // records that follow a followed set
}

// measureEvents times the watch events of a churning cluster as the
// controller handles them: each object decoded from protobuf (the
// controller's client asks for it), made facts, stored, and its handler
// run; the pass after a pod's event judges its record again (its claims
// kept: nothing changed that a verdict reads); a StatefulSet's event
// judges again every record that follows the set.
func measureEvents(b *testing.B, m *Manager, now time.Time) (c eventCost) {
	ctx := context.Background()
	enc := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), schema.GroupVersions{corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion})
	dec := scheme.Codecs.UniversalDeserializer()
	wire := func(o k8sruntime.Object) []byte {
		var buf bytes.Buffer
		if err := enc.Encode(o, &buf); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	handle := func(data []byte, kept cache.SharedIndexInformer, handler func(any)) {
		o, _, err := dec.Decode(data, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		f, _ := facts.Transform(o)
		if err := kept.GetIndexer().Update(f); err != nil {
			b.Fatal(err)
		}
		handler(f)
	}
	var pods, idle, followed [][]byte
	for i := range benchEvents {
		p := benchPod(i, i%benchPerNode)
		p.ResourceVersion = "123456790" // a status change: what a kubelet's update carries
		p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now)
		pods = append(pods, wire(p))
		s := benchSet(benchNamespaces*5 + i%benchIdleSets)
		s.Status.ReadyReplicas = 39
		idle = append(idle, wire(s))
		f := benchSet(i % (benchNamespaces * 5))
		f.Status.ReadyReplicas = 39
		followed = append(followed, wire(f))
	}
	c.pod = benchTime(func() {
		for _, data := range pods {
			handle(data, m.pods, m.podChanged)
		}
	}) / benchEvents
	c.rejudge = benchTime(func() {
		for i := range benchEvents {
			m.judge(ctx, fmt.Sprintf("node-%04d", i), now)
		}
	}) / benchEvents
	c.idleSet = benchTime(func() {
		for _, data := range idle {
			handle(data, m.sets, m.setChanged)
		}
	}) / benchEvents
	c.followers = len(m.seen.setChanged("ns-0000/db000"))
	const followedEvents = 20 // each judges its followers again: fewer make the figure
	c.followedSet = benchTime(func() {
		for _, data := range followed[:followedEvents] {
			handle(data, m.sets, func(o any) {
				s := o.(*facts.StatefulSet)
				for _, name := range m.seen.setChanged(s.Namespace + "/" + s.Name) {
					m.judge(ctx, name, now)
				}
			})
		}
	}) / followedEvents
	return c
}

// fillShards puts into m's shard cache what a sync of namespaces writes.
func fillShards(b *testing.B, m *Manager, namespaces []string) {
	for _, ns := range namespaces {
		writes, _ := m.plan(ns, m.st.want(ns))
		for _, w := range writes {
			x := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: placementv1.ShardName(w.series, w.Number),
				Labels: map[string]string{placementv1.IndexLabel: w.series}}, Data: w.Nodes}
			if err := m.shards.GetIndexer().Add(x); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchTime is the least of three runs of f.
func benchTime(f func()) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		f()
		if d := time.Since(start); d < best {
			best = d
		}
	}
	return best
}
