package placement

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The Node lists the shards that hold the node's entries: read once, then
// written when the node first holds entries in a shard it does not list;
// a shard the node leaves stays listed until the next such write; passes
// in between read and write nothing of the Node.
func TestPublisherListsItsShards(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.api.bound["db/db-1"] = "node1"
	r.pass() // no entries: nothing to list, nothing read
	if r.api.nodeGets != 0 || r.api.nodeWrites != 0 {
		t.Fatalf("a node without entries read its Node %d times, wrote it %d", r.api.nodeGets, r.api.nodeWrites)
	}
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0))
	r.pass()
	r.pass()
	if got := r.api.listed["node1"]; got != "db/"+shardNumber(ShardOf("db-0")) || r.api.nodeGets != 1 || r.api.nodeWrites != 1 {
		t.Fatalf("listed %q after %d reads, %d writes; want db-0's shard, one read, one write", got, r.api.nodeGets, r.api.nodeWrites)
	}
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), allocated("10.244.1.6", "db", "db-1", "db-1", t0))
	r.pass()
	want, _ := formatListed([]shardRef{{"db", ShardOf("db-0")}, {"db", ShardOf("db-1")}})
	if got := r.api.listed["node1"]; got != want || r.api.nodeWrites != 2 || r.api.nodeGets != 1 {
		t.Fatalf("listed %q after %d writes; want %q", got, r.api.nodeWrites, want)
	}
	r.store.set() // both released: they stay listed (a read each at worst), no write
	r.pass()
	r.pass()
	if r.api.nodeWrites != 2 || r.api.listed["node1"] != want {
		t.Fatalf("after the releases: listed %q, %d writes", r.api.listed["node1"], r.api.nodeWrites)
	}
	r.start() // a new process: reads the Node once, finds its shards listed, writes nothing
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0.Add(time.Minute)))
	r.pass()
	if r.api.nodeWrites != 2 || r.api.nodeGets != 2 {
		t.Fatalf("a restarted publisher: %d Node reads, %d writes; want 2 and 2", r.api.nodeGets, r.api.nodeWrites)
	}
	r.api.down = true
	r.store.set(allocated("10.244.1.7", "web", "web-0", "web-0", t0))
	r.pass()
	if r.errors("list") != 0 {
		t.Fatalf("a failed shard write tried to list: %d list errors", r.errors("list"))
	}
}

// A node re-installed under the same name: no file of written shards, its
// Node lists them. ReadOwn reads those, says which entries its shard still
// counts as this very Node's (by UID) and which another node claimed
// later, and the shards join the written set, so that the next pass
// publishes the store there (a store that keeps an entry's claim keeps its
// seq: an update, not a claim).
func TestReadOwnFromTheNode(t *testing.T) {
	r := newRig(t)
	r.api.bound["db/db-0"] = "node1"
	r.api.bound["db/db-1"] = "node1"
	r.store.set(allocated("10.244.1.5", "db", "db-0", "db-0", t0), allocated("10.244.1.6", "db", "db-1", "db-1", t0))
	r.pass()
	l0, _ := r.api.line("db", "db-0", "node1")
	// db-1 moves to node2, which claims it later.
	node2 := NewWithAPI(r.api.as("node2"), Options{Node: "node2", Store: &fakeStore{entries: nil}, Now: func() time.Time { return r.now }})
	r.api.bound["db/db-1"] = "node2"
	node2.opts.Store.(*fakeStore).set(allocated("10.244.2.9", "db", "db-1", "db-1", t0.Add(time.Minute)))
	node2.Pass(context.Background())

	// node1 re-installed: no file of written shards, an empty store.
	r.file = t.TempDir() + "/" + WrittenFileName
	r.store.set()
	r.start()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "uid-node1",
		Annotations: map[string]string{ShardsAnnotation: r.api.listed["node1"]}}}
	own, err := r.p.ReadOwn(context.Background(), node)
	if err != nil || len(own) != 2 {
		t.Fatalf("ReadOwn = %+v, %v", own, err)
	}
	byID := map[string]Own{}
	for _, o := range own {
		byID[o.Identity] = o
	}
	if o := byID["db-0"]; !o.Owned || o.LaterBy != "" || !o.Running() || o.Seq != l0.Seq {
		t.Errorf("db-0: %+v", o)
	}
	if o := byID["db-1"]; !o.Owned || o.LaterBy != "node2" {
		t.Errorf("db-1: %+v, want claimed later by node2", o)
	}
	if got := r.p.written.refs(); len(got) != 2 {
		t.Fatalf("written set after ReadOwn: %v", got)
	}
	// The Node deleted and registered again: a new UID, its entries are not its own.
	node.UID = types.UID("uid-node1-again")
	own, _ = r.p.ReadOwn(context.Background(), node)
	if len(own) != 2 || own[0].Owned || own[1].Owned {
		t.Errorf("entries of an earlier Node of the name: %+v, want not owned", own)
	}

	// The store taken back with db-0's reservation, its ADD time kept: the
	// next pass writes db-0's end on the same claim.
	end := r.now.Add(time.Hour)
	r.store.set(reservedAt("10.244.1.5", "db", "db-0", "db-0", t0, end))
	claims := r.writes(WriteClaim)
	r.pass()
	l, ok := r.api.line("db", "db-0", "node1")
	if !ok || l.Seq != l0.Seq || !l.Until.Equal(end) || r.writes(WriteClaim) != claims {
		t.Fatalf("db-0 after the store was taken back: %+v %t, %d claims; want its claim kept with its end", l, ok, r.writes(WriteClaim)-claims)
	}
	if _, ok := r.api.line("db", "db-1", "node1"); ok {
		t.Error("db-1, which node2 claimed later and node1 did not take back, is still node1's entry")
	}
	if strings.Contains(r.logs.String(), "claim refused") {
		t.Errorf("a claim was refused: %s", r.logs.String())
	}
}
