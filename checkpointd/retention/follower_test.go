package retention

import (
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// fakeAPI is the watches' caches as the Follower reads them.
type fakeAPI struct {
	pods        []*corev1.Pod
	podsSynced  bool
	sets        map[string]*apiclient.StatefulSet
	setsSynced  bool
	claimedNode map[placement.Key]string
}

func (a *fakeAPI) Pods() ([]*corev1.Pod, bool) { return a.pods, a.podsSynced }
func (a *fakeAPI) StatefulSet(ns, name string) (*apiclient.StatefulSet, bool) {
	return a.sets[ns+"/"+name], a.setsSynced
}
func (a *fakeAPI) StatefulSetsSynced() bool { return a.setsSynced }

// node is a node's IPAM store (a real bbolt file), its engine and clock,
// the Follower over them, and the pods of StatefulSet prod/db it runs.
type node struct {
	t     *testing.T
	dir   string
	eng   *ipam.Engine
	now   time.Time
	api   *fakeAPI
	f     *Follower
	m     *prometheus.Registry
	ips   map[string]string
	boot  string
	store *ipamstore.Store
}

func newNode(t *testing.T) *node {
	conf, err := ipam.LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"cbr0","ipam":{"type":"stickyip","subnet":"10.9.0.0/28","hostLocalDataDir":""}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dir: t.TempDir(), now: t0, boot: "b1", ips: map[string]string{}, m: prometheus.NewRegistry(),
		api: &fakeAPI{podsSynced: true, setsSynced: true, sets: map[string]*apiclient.StatefulSet{}}}
	env := ipam.Env{Now: func() time.Time { return n.now }, BootID: "b1"}
	n.eng = ipam.NewEngine(conf, env)
	n.store = ipamstore.NewWithEnv(n.dir, time.Second, env)
	n.f = New(Options{API: n.api, Store: n.store, Interval: time.Second, Registry: n.m, Now: func() time.Time { return n.now },
		ClaimedLater: func() map[placement.Key]string { return n.api.claimedNode }})
	return n
}

// run adds pod name of StatefulSet set (uid "u-"+name) with a 10-minute
// reservation, as its ADD does, and lists it running.
func (n *node) run(name, set string) {
	n.t.Helper()
	req := ipam.AddRequest{ContainerID: "c-" + name, IfName: "eth0", Netns: "/run/netns/" + name, UID: "u-" + name, PodName: name,
		Identity: reservation.Identity{Namespace: "prod", Name: name, IfName: "eth0"}, Duration: 10 * time.Minute}
	err := boltstore.New(n.dir, time.Second).Update("cbr0", func(tx reservation.Txn) error {
		recs, err := n.eng.Add(tx, req)
		if err == nil {
			n.ips[name] = recs[0].IP.String()
		}
		return err
	})
	if err != nil {
		n.t.Fatal(err)
	}
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", UID: types.UID("u-" + name)}}
	if set != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set, UID: n.api.sets["prod/"+set].UID, Controller: &yes}}
	}
	n.api.pods = append(n.api.pods, p)
}

// del runs pod name's DEL and forgets the pod.
func (n *node) del(name string) {
	n.t.Helper()
	err := boltstore.New(n.dir, time.Second).Update("cbr0", func(tx reservation.Txn) error { return n.eng.Del(tx, "c-"+name, "eth0") })
	if err != nil {
		n.t.Fatal(err)
	}
	n.api.pods = slices.DeleteFunc(n.api.pods, func(p *corev1.Pod) bool { return p.Name == name })
}

func (n *node) record(name string) *reservation.Record {
	n.t.Helper()
	es, err := n.store.Entries()
	if err != nil {
		n.t.Fatal(err)
	}
	for _, e := range es {
		if e.IP.String() == n.ips[name] {
			return e.Record
		}
	}
	return nil
}

// pass runs a pass and fails unless it applied the actions want (in any
// order: records are read in address order).
func (n *node) pass(want string) {
	n.t.Helper()
	got := strings.Split(actions(n.f.Pass()), ",")
	w := strings.Split(want, ",")
	slices.Sort(got)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		n.t.Fatalf("pass: %q, want %q", got, want)
	}
}

// The life of StatefulSet db on one node: its pods' allocations follow it
// once seen; scaled down with whenScaled Retain the deleted members' hold
// outlives any duration; the policy changed to Delete releases them; the
// StatefulSet deleted with whenDeleted Delete releases the rest. Nothing is
// written when nothing changes, and nothing is decided before both
// watches have synced (a checkpointd started with the API server away).
func TestFollowerLifecycle(t *testing.T) {
	n := newNode(t)
	n.api.sets["prod/db"] = statefulSet(3, 0, nil)
	for i := range 3 {
		n.run(fmt.Sprintf("db-%d", i), "db")
	}
	n.run("web", "") // a bare sticky pod: nothing to record (none yet)
	n.api.setsSynced = false
	n.pass("")
	n.api.setsSynced = true
	n.pass("follow,follow,follow")
	n.pass("")
	if r := n.record("db-2"); r.StatefulSet == nil || r.StatefulSet.UID != "u1" || r.StatefulSet.WhenScaled != "Retain" {
		t.Fatalf("db-2's allocation: %+v", r.StatefulSet)
	}

	// Scaled to 1, whenScaled Retain: db-1 and db-2 held, a week later.
	n.api.sets["prod/db"] = statefulSet(1, 0, nil)
	n.del("db-2")
	n.del("db-1")
	n.now = n.now.Add(7 * 24 * time.Hour)
	n.pass("")
	n.run("other", "")
	for _, name := range []string{"db-1", "db-2"} {
		if r := n.record(name); r == nil || !r.Held() {
			t.Fatalf("%s a week after the scale-down: %+v, want held", name, r)
		}
	}
	if v := testutil.ToFloat64(n.f.held); v != 2 {
		t.Fatalf("checkpointd_retention_held %v, want 2", v)
	}

	// The policy is changed to whenScaled Delete: released at once.
	n.api.sets["prod/db"] = statefulSet(1, 0, pvc("Delete", "Delete"))
	n.pass("refresh,release,refresh,release,follow")
	if n.record("db-1") != nil || n.record("db-2") != nil {
		t.Fatal("db-1 and db-2 still reserved after the policy became whenScaled Delete")
	}
	if r := n.record("db-0"); r.StatefulSet.WhenDeleted != "Delete" {
		t.Fatalf("db-0's allocation still records %+v", r.StatefulSet)
	}

	// Deleted with whenDeleted Delete: db-0, deleted by the garbage
	// collector after it, is released at the next pass.
	delete(n.api.sets, "prod/db")
	n.del("db-0")
	n.pass("release")
	if n.record("db-0") != nil {
		t.Fatal("db-0 still reserved after its StatefulSet's deletion (whenDeleted Delete)")
	}
	if got := testutil.ToFloat64(n.f.changes.WithLabelValues("release")); got != 3 {
		t.Fatalf("checkpointd_retention_changes_total{action=release} %v, want 3", got)
	}
}

// With the API server away the watches keep their last view, and a
// restarted checkpointd has none: held reservations stay held (nothing is
// released on a guess); a later claim by another node ends the hold, the
// reservation then lasting its duration.
func TestFollowerKeepsWhatItKnew(t *testing.T) {
	n := newNode(t)
	n.api.sets["prod/db"] = statefulSet(2, 0, pvc("Delete", "Delete"))
	n.run("db-0", "db")
	n.run("db-1", "db")
	n.pass("follow,follow")
	n.del("db-0")
	n.del("db-1")

	// A restarted checkpointd, the API server away: nothing synced.
	n.api = &fakeAPI{}
	n.f = New(Options{API: n.api, Store: n.store, Interval: time.Second, Now: func() time.Time { return n.now }})
	n.now = n.now.Add(time.Hour)
	n.pass("")
	if !n.record("db-0").Held() || !n.record("db-1").Held() {
		t.Fatal("held reservations changed with nothing known")
	}
	// The watch syncs: db still there with 2 replicas; node2 runs db-1 now.
	n.api.setsSynced, n.api.podsSynced = true, true
	n.api.sets = map[string]*apiclient.StatefulSet{"prod/db": statefulSet(2, 0, pvc("Delete", "Delete"))}
	n.f.opts.ClaimedLater = func() map[placement.Key]string {
		return map[placement.Key]string{{Namespace: "prod", Identity: "db-1"}: "node2"}
	}
	n.pass("expire")
	r := n.record("db-1")
	if r.Held() || r.StatefulSet.MovedTo != "node2" || !r.ExpiresAt.Equal(n.now.Add(10*time.Minute)) {
		t.Fatalf("db-1 claimed by node2: %+v (%+v), want its 10 minutes from now", r, r.StatefulSet)
	}
	if !n.record("db-0").Held() {
		t.Fatal("db-0 is no longer held")
	}
}
