package manager

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
	"github.com/stickyip/stickyip/controller/facts"
	"github.com/stickyip/stickyip/controller/index"
)

// The controller's cost at 5,000 nodes: 150,000 pods (30 a node, in 1,000
// namespaces, each a StatefulSet's), 5,000 records of 30 entries. Run with
// make bench-controller.
const (
	benchNodes      = 5000
	benchPerNode    = 30
	benchNamespaces = 1000
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

// fillCaches puts what the informers would hold into m's caches: the
// facts of 150,000 pods, their StatefulSets, 5,000 Nodes; it returns the
// heap the pods took.
func fillCaches(b *testing.B, m *Manager) (podBytes uint64) {
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
	podBytes = heap() - before
	for k := range benchNamespaces * 5 {
		ns, set := fmt.Sprintf("ns-%04d", k%benchNamespaces), fmt.Sprintf("db%03d", (k/benchNamespaces)%5)
		s := statefulSet(ns, set, types.UID("set-"+ns+"-"+set), 40, "Retain", "Delete")
		o, _ := facts.Transform(s)
		_ = m.sets.GetIndexer().Add(o)
	}
	for n := range benchNodes {
		o, _ := facts.Transform(node(fmt.Sprintf("node-%04d", n), types.UID(fmt.Sprintf("node-uid-%04d", n))))
		_ = m.nodes.GetIndexer().Add(o)
	}
	return podBytes
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
// memory of its caches per pod and per record entry, the CPU of a claim
// verified (its pod and StatefulSet looked up and checked, from scratch)
// and of a rebuild of every namespace's index.
func BenchmarkController(b *testing.B) {
	m := benchManager(b)
	podBytes := fillCaches(b, m)
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
	namespaces := make([]string, 0, len(m.st.cands))
	for ns := range m.st.cands {
		namespaces = append(namespaces, ns)
	}
	rebuild := func() (writes int) {
		for _, ns := range namespaces {
			have, _ := m.shardsOf(ns)
			writes += len(index.Plan(have, m.st.want(ns), placementv1.ShardBytes))
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
	b.ReportMetric(float64(podBytes)/float64(benchNodes*benchPerNode), "B/pod")
	b.ReportMetric(float64(entryBytes)/float64(entries), "B/entry")
	b.ReportMetric(float64(judged.Nanoseconds()), "ns/claim")
	b.ReportMetric(float64(unchanged.Milliseconds()), "ms/rebuild")
	fmt.Printf("stickyip-controller at %d nodes:\n"+
		"  %d pods cached in %.1f MiB (%d B/pod)\n"+
		"  %d record entries (records with their status, claims, candidates, index) in %.1f MiB (%d B/entry)\n"+
		"  a claim verified (pod, StatefulSet, retention) in %v\n"+
		"  every namespace's index (%d namespaces, %d identities) planned in %v against its shards, %v from no shards\n",
		benchNodes, benchNodes*benchPerNode, float64(podBytes)/(1<<20), podBytes/uint64(benchNodes*benchPerNode),
		entries, float64(entryBytes)/(1<<20), entryBytes/uint64(entries), judged, len(namespaces), entries, unchanged, fromNothing)
}

// fillShards puts into m's shard cache what a sync of namespaces writes.
func fillShards(b *testing.B, m *Manager, namespaces []string) {
	for _, ns := range namespaces {
		for _, w := range index.Plan(nil, m.st.want(ns), placementv1.ShardBytes) {
			x := &placementv1.PlacementIndex{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: placementv1.ShardName(w.Number)},
				Spec: placementv1.PlacementIndexSpec{Nodes: w.Nodes}}
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
