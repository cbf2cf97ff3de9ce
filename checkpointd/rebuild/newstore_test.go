package rebuild

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// reinstalled is a re-imaged node: re-installed under the same name, nothing
// of stickyip on its disk, its Node (same UID, pod CIDR 10.9.0.0/25) listing
// the shards of its entries: db-0 ran there (a StatefulSet pod, its entry
// "-", on an address that is not the first free one), gone was deleted (its
// reservation until 25 minutes from now), web-1 ran there but moved to node2
// since, old is an entry of the Node object before this one (deleted and
// registered again), far is an address of a pod CIDR the node no longer
// has, and over a reservation that ended while the node was away.
type reinstalled struct {
	*node
	ips  map[string]string
	wait time.Duration // the plugin's ipam.newStoreWait
}

func newReinstalled(t *testing.T) *reinstalled {
	n := newNode(t, true)
	n.now = time.Now().UTC().Truncate(time.Millisecond)
	r := &reinstalled{node: n, wait: 2 * time.Minute, ips: map[string]string{
		"db-0": "10.9.0.5", "gone": "10.9.0.6", "web-1": "10.9.0.7", "old": "10.9.0.8", "far": "10.9.0.200", "over": "10.9.0.9"}}
	n.events.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "uid-node1"},
		Spec: corev1.NodeSpec{PodCIDR: "10.9.0.0/25", PodCIDRs: []string{"10.9.0.0/25"}}} // 10.9.0.128/25 was the node's before
	ip := func(name string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(r.ips[name])} }
	since := n.now.Add(-time.Hour)
	n.index.entries = []IndexEntry{
		{Namespace: "apps", Identity: "db-0", Pod: "db-0", PodUID: "uid-db-0", IPs: ip("db-0"), Since: since},
		{Namespace: "apps", Identity: "gone", Pod: "gone", PodUID: "uid-gone", IPs: ip("gone"), Since: since, Until: n.now.Add(25 * time.Minute)},
		{Namespace: "apps", Identity: "web-1", Pod: "web-1", IPs: ip("web-1"), Since: since, LaterBy: "node2"},
		{Namespace: "apps", Identity: "old", Pod: "old", IPs: ip("old"), Since: since, Until: n.now.Add(time.Hour), Disowned: true},
		{Namespace: "apps", Identity: "far", Pod: "far", IPs: ip("far"), Since: since, Until: n.now.Add(time.Hour)},
		{Namespace: "apps", Identity: "over", Pod: "over", IPs: ip("over"), Since: since, Until: n.now.Add(-time.Second)},
	}
	return r
}

// plugin runs a pod's ADD as the plugin does on this node (its network
// configured with ipam.newStoreWait r.wait).
func (r *reinstalled) plugin(cid, name string, keep time.Duration) (string, error) {
	r.t.Helper()
	return r.addWaiting(cid, "apps", name, keep, r.wait)
}

// requireTakenBack checks what users of the node see once the store is
// made: db-0's and gone's addresses reserved for them (db-0's for
// reservation.maxDuration, gone's to its end), nothing else; then 8 new
// pods, none of which gets either address (web-1's, old's and over's are
// free again), and db-0 and gone re-created get theirs back.
func (r *reinstalled) requireTakenBack(t *testing.T, start time.Time) {
	t.Helper()
	got := r.entries()
	if e := got[r.ips["db-0"]]; e.State != reservation.Reserved || e.Identity.Name != "db-0" || !e.ExpiresAt.Equal(start.Add(7*24*time.Hour)) ||
		!e.AllocatedAt.Equal(r.index.entries[0].Since) {
		t.Fatalf("db-0's %s: %+v, want reserved for db-0 7 days from the node's start (%s), its ADD time kept", r.ips["db-0"], *e.Record, start)
	}
	if e := got[r.ips["gone"]]; e.State != reservation.Reserved || e.Identity.Name != "gone" || !e.ExpiresAt.Equal(r.index.entries[1].Until) {
		t.Fatalf("gone's %s: %+v, want reserved to its entry's end", r.ips["gone"], e)
	}
	if len(got) != 2 {
		t.Fatalf("the new store holds %d records, want db-0's and gone's: %+v", len(got), got)
	}
	// The pods' UIDs come back with them: the node applies the controller's
	// later verdict on a claim (a StatefulSet's Release) only to the record
	// of the claim's pod.
	if got[r.ips["db-0"]].UID != "uid-db-0" || got[r.ips["gone"]].UID != "uid-gone" {
		t.Fatalf("the records' pod UIDs: db-0 %q, gone %q; want the record's uid-db-0 and uid-gone", got[r.ips["db-0"]].UID, got[r.ips["gone"]].UID)
	}
	r.check()
	for i := range 8 {
		name := fmt.Sprintf("new-%d", i)
		ip, err := r.plugin("c-"+name, name, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ip == r.ips["db-0"] || ip == r.ips["gone"] {
			t.Fatalf("%s got %s, which the index lists for this node", name, ip)
		}
	}
	for _, name := range []string{"db-0", "gone"} {
		if ip, err := r.plugin("c-"+name+"-2", name, 30*time.Minute); err != nil || ip != r.ips[name] {
			t.Fatalf("%s re-created got %s (%v), want its %s", name, ip, err, r.ips[name])
		}
	}
	r.check()
}

// A re-imaged node gets back, before any new pod takes an address, every
// reservation its entries list and every address of a pod that ran there;
// not an address outside its pod CIDR, nor one another node claimed later,
// nor an earlier Node object's. The plugin's first ADD comes first here:
// it waits (error 11), and the next pass makes the store.
func TestReinstalledNodeTakesItsAddressesBack(t *testing.T) {
	r := newReinstalled(t)
	if ip, err := r.plugin("c-early", "early", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("a pod's ADD before checkpointd looked: got %q (%v), want ErrAwaiting", ip, err)
	}
	w, ok := boltstore.New(r.dir, time.Second).NewStoreWait()
	if !ok || w.Until.Sub(w.Since) != r.wait {
		t.Fatalf("the plugin's wait: %+v %t", w, ok)
	}
	first := w.Since // the node's start: its first call
	r.now = r.now.Add(3 * time.Second)
	if !r.b.Pass(context.Background()) {
		t.Fatal("no store made")
	}
	if r.index.reads != 1 || r.index.node == nil || r.index.node.UID != "uid-node1" {
		t.Fatalf("the index read %d times, with Node %+v", r.index.reads, r.index.node)
	}
	if _, err := os.Stat(filepath.Join(r.dir, boltstore.WaitFile)); !os.IsNotExist(err) {
		t.Fatalf("the wait is still there: %v", err)
	}
	if testutil.ToFloat64(r.m.StoreReclaims) != 1 || testutil.ToFloat64(r.m.StoreReclaimWaiting) != 0 || testutil.ToFloat64(r.m.StoreReclaimSeconds) < 1 {
		t.Fatalf("metrics: reclaims %v waiting %v seconds %v", testutil.ToFloat64(r.m.StoreReclaims), testutil.ToFloat64(r.m.StoreReclaimWaiting), testutil.ToFloat64(r.m.StoreReclaimSeconds))
	}
	if len(r.events.events) != 1 || !strings.Contains(r.events.events[0], EventReclaimed) || !strings.Contains(r.events.events[0], "0 allocated, 2 reserved") ||
		!strings.Contains(r.events.events[0], "node node2 claimed the identity later") || !strings.Contains(r.events.events[0], "outside") {
		t.Fatalf("Events %q", r.events.events)
	}
	r.requireTakenBack(t, first)
	if r.b.Pass(context.Background()) || r.index.reads != 1 {
		t.Fatal("a node with its store looked at the cluster again")
	}
}

// The API server answers only later than the node starts: checkpointd holds
// the new store back (the plugin configured without a wait of its own: no
// address), at most reservation.maxDuration; once the API server answers,
// the store is made, and no address the index lists went to another pod.
func TestReinstalledNodeWithTheAPIServerAway(t *testing.T) {
	r := newReinstalled(t)
	r.wait = 0
	r.api.up = false
	start := r.now
	for range 2 {
		if r.b.Pass(context.Background()) {
			t.Fatal("a store made with the API server away")
		}
		r.now = r.now.Add(time.Minute)
	}
	w, ok := boltstore.New(r.dir, time.Second).NewStoreWait()
	if !ok || !w.Since.Equal(start) || !w.Until.Equal(start.Add(7*24*time.Hour)) || !strings.Contains(w.By, "the API server has not answered yet") {
		t.Fatalf("wait %+v %t, want it held from the node's start for reservation.maxDuration", w, ok)
	}
	if testutil.ToFloat64(r.m.StoreReclaimWaiting) != 1 || r.index.reads != 0 {
		t.Fatalf("waiting %v, index read %d times with the API server away", testutil.ToFloat64(r.m.StoreReclaimWaiting), r.index.reads)
	}
	if _, err := r.plugin("c-static", "static", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("a static pod's ADD with the API server away: %v, want ErrAwaiting", err)
	}
	r.api.up = true
	if !r.b.Pass(context.Background()) {
		t.Fatal("no store made once the API server answers")
	}
	r.requireTakenBack(t, start)
}

// A truly new node (no record of its own: never had entries, or a Node
// deleted and registered again whose record names the earlier Node) starts
// as today: one read of its record, and the plugin's first ADD does not
// wait when checkpointd looked first.
func TestNewNodeStartsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries func(r *reinstalled) []IndexEntry
	}{
		{"never had entries", func(*reinstalled) []IndexEntry { return nil }},
		{"registered again (its record names the earlier Node)", func(r *reinstalled) []IndexEntry {
			var out []IndexEntry
			for _, e := range r.index.entries {
				e.Disowned = true
				out = append(out, e)
			}
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReinstalled(t)
			r.index.entries = tc.entries(r)
			if r.b.Pass(context.Background()) || r.index.reads != 1 {
				t.Fatalf("a new node: store made, or its record read %d times, want once", r.index.reads)
			}
			ip, err := r.plugin("c-a", "a", 0)
			if err != nil || ip != "10.9.0.2" {
				t.Fatalf("the first ADD on a new node: %s %v, want the first address at once", ip, err)
			}
			r.b.Pass(context.Background())
			if r.index.reads != 1 || len(r.events.events) != 0 {
				t.Fatalf("record reads %d, want 1 (the first look); events %q", r.index.reads, r.events.events)
			}
		})
	}
}

// The plugin's ADD comes before checkpointd's first look on a new node: it
// waits once; the next pass ends the wait, and the ADD tried again gets an
// address.
func TestNewNodeAddBeforeTheLook(t *testing.T) {
	r := newReinstalled(t)
	r.events.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "uid-new"}}
	if _, err := r.plugin("c-a", "a", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("ADD before the look: %v", err)
	}
	r.b.Pass(context.Background())
	if ip, err := r.plugin("c-a", "a", 0); err != nil || ip != "10.9.0.2" {
		t.Fatalf("ADD after the look: %s %v", ip, err)
	}
}

// Without placement (--placement=false) there is nothing to read: a wait
// the plugin started ends at the next pass. With the Node not known to
// checkpointd while the API server answers, the plugin's own bound stands:
// checkpointd neither ends nor extends it.
func TestNewStoreWithoutPlacementOrNode(t *testing.T) {
	r := newReinstalled(t)
	r.b.cfg.Index = nil
	if _, err := r.plugin("c-a", "a", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("ADD before the look: %v", err)
	}
	r.b.Pass(context.Background())
	if _, err := r.plugin("c-a", "a", 0); err != nil {
		t.Fatalf("ADD with placement off, after a pass: %v", err)
	}

	r = newReinstalled(t)
	r.events.unknown = true
	if _, err := r.plugin("c-a", "a", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("ADD before the look: %v", err)
	}
	before, _ := boltstore.New(r.dir, time.Second).NewStoreWait()
	r.b.Pass(context.Background())
	after, _ := boltstore.New(r.dir, time.Second).NewStoreWait()
	if before != after || r.index.reads != 0 {
		t.Fatalf("the wait changed with the Node unknown: %+v → %+v", before, after)
	}
}

// The index cannot be read yet (a transient error): the store is held back
// meanwhile, past the plugin's own bound; refused by the API server (no
// RBAC: nothing can be read), the wait ends.
func TestNewStoreWhenTheIndexCannotBeRead(t *testing.T) {
	r := newReinstalled(t)
	r.index.err = errAway
	if _, err := r.plugin("c-a", "a", 0); !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatal(err)
	}
	r.b.Pass(context.Background())
	w, _ := boltstore.New(r.dir, time.Second).NewStoreWait()
	if w.Until.Sub(w.Since) != 7*24*time.Hour || testutil.ToFloat64(r.m.StoreReclaimWaiting) != 1 {
		t.Fatalf("wait %+v, want it extended to reservation.maxDuration", w)
	}
	r.index.err = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "stickyip-index-0", errors.New("no RBAC"))
	if r.b.Pass(context.Background()) {
		t.Fatal("a store made without the index")
	}
	if _, err := r.plugin("c-a", "a", 0); err != nil {
		t.Fatalf("ADD once the index was refused: %v", err)
	}
}

// While the node has no store, the publisher is given nothing to publish
// (placement.ErrNotYet, a quiet skip): publishing an empty store would
// remove the very entries the new store is to take back. Once the store is
// made, it publishes it.
func TestNoStoreIsNotPublished(t *testing.T) {
	r := newReinstalled(t)
	if _, err := (Published{Store: r.store}).Entries(); !errors.Is(err, placement.ErrNotYet) {
		t.Fatalf("Entries of a node without a store: %v, want placement.ErrNotYet", err)
	}
	if !r.b.Pass(context.Background()) {
		t.Fatal("no store made")
	}
	got, err := (Published{Store: r.store}).Entries()
	if err != nil || len(got) != 2 {
		t.Fatalf("Entries of the store made: %d, %v", len(got), err)
	}
}
