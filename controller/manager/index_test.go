package manager

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api/apitest"
)

// A claim for a pod bound to the node reaches the index; the record's
// status says so (accepted, indexed, counted from the pod's creation).
func TestClaimReachesIndex(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	poll(t, "the claim accepted and indexed", func() bool { c := h.claim("n1", "ns", "db-0"); return c != nil && c.Indexed })
	c := h.claim("n1", "ns", "db-0")
	if c.PodUID != "p1" || c.Pod != "db-0" || !c.Created.Equal(&metav1.Time{Time: t0}) || c.Refused != "" || c.StatefulSet != nil {
		t.Fatalf("claim %+v", c)
	}
	r := h.srv.Record("n1")
	if r.Status.NodeUID != "nu1" || r.Status.ObservedGeneration != r.Generation {
		t.Fatalf("status %+v of generation %d", r.Status, r.Generation)
	}
	shards := h.shards("ns")
	if len(shards) != 1 || shards[0].Name != "stickyip-placement-names-0" || shards[0].Labels[placementv1.IndexLabel] != placementv1.Names {
		t.Fatalf("shards %+v", shards)
	}
	// The node drops the entry: it leaves the index, and the emptied shard goes.
	h.srv.PutRecord(nodeRecord("n1", "nu1"))
	poll(t, "the shard deleted", func() bool { return len(h.shards("ns")) == 0 })
	poll(t, "the claim gone from the status", func() bool { return len(h.srv.Record("n1").Status.Claims) == 0 })
}

// Claims the pod does not back are refused, with an Event on the record;
// the good one beside them is indexed.
func TestClaimsRefused(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), node("n2", "nu2"),
		pod("ns", "good-0", "p0", "n1", 0),
		pod("ns", "elsewhere-0", "p1", "n2", 0),
		pod("ns", "static-n1", "p2", "n1", 0, annotated("kubernetes.io/config.mirror", "x")),
		pod("ns", "cache-abcde", "p3", "n1", 0, annotated("stickyip.io/identity", "cache")))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1",
		entry("ns", "good-0", "good-0", "p0", true),
		entry("ns", "elsewhere-0", "elsewhere-0", "p1", true),
		entry("ns", "static-n1", "static-n1", "p2", true),
		entry("ns", "identity:cash", "cache-abcde", "p3", true)))
	want := map[string]string{"elsewhere-0": "bound to node n2, not n1", "static-n1": "mirror pod", "identity:cash": "identity is identity:cache, not identity:cash"}
	poll(t, "three claims refused", func() bool {
		for id := range want {
			if c := h.claim("n1", "ns", id); c == nil || c.Refused == "" {
				return false
			}
		}
		return true
	})
	for id, why := range want {
		if c := h.claim("n1", "ns", id); !strings.Contains(c.Refused, why) || c.Accepted() || c.Indexed {
			t.Errorf("%s: claim %+v, want refused with %q", id, c, why)
		}
	}
	poll(t, "the good claim indexed", func() bool { c := h.claim("n1", "ns", "good-0"); return c != nil && c.Indexed })
	if idx := h.index("ns"); len(idx) != 1 || idx["good-0"] != "n1" {
		t.Fatalf("index %v: only good-0 belongs there", idx)
	}
	poll(t, "an Event for each refusal", func() bool { return len(h.events("n1")) == 3 })
	for _, msg := range h.events("n1") {
		found := false
		for id, why := range want {
			found = found || (strings.Contains(msg, "claim "+id+" in ns refused") && strings.Contains(msg, why))
		}
		if !found {
			t.Errorf("Event %q names no refusal", msg)
		}
	}
}

// A pod the controller never saw is waited for, then refused; one that
// appears in time is accepted.
func TestUnknownPodPendingThenRefused(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"))
	cfg := testConfig()
	cfg.PendingFor = 2 * time.Second
	h.ready(cfg)
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "late-0", "late-0", "p1", true), entry("ns", "never-0", "never-0", "p2", true)))
	poll(t, "two pending claims", func() bool { return h.claim("n1", "ns", "late-0") != nil && h.claim("n1", "ns", "never-0") != nil })
	if c := h.claim("n1", "ns", "never-0"); c.Accepted() || c.Refused != "" {
		t.Fatalf("pending claim %+v: neither accepted nor refused yet", c)
	}
	h.create(pod("ns", "late-0", "p1", "n1", 0))
	poll(t, "late-0 indexed", func() bool { return h.index("ns")["late-0"] == "n1" })
	poll(t, "never-0 refused", func() bool { c := h.claim("n1", "ns", "never-0"); return c.Refused != "" })
	if c := h.claim("n1", "ns", "never-0"); !strings.Contains(c.Refused, "no such pod") {
		t.Fatalf("claim %+v", c)
	}
	if _, ok := h.index("ns")["never-0"]; ok {
		t.Fatal("a refused claim is in the index")
	}
}

// The pod created last wins: the identity moves to the node that runs it
// now, and the earlier node's claim stays accepted but not indexed.
func TestLaterPodWins(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), node("n2", "nu2"), pod("ns", "db-0", "p1", "n1", 0))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	poll(t, "db-0 on n1", func() bool { return h.index("ns")["db-0"] == "n1" })
	if err := h.kube.Tracker().Delete(podsGVR, "ns", "db-0"); err != nil {
		t.Fatal(err)
	}
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", false)))
	h.create(pod("ns", "db-0", "p2", "n2", time.Minute))
	h.srv.PutRecord(nodeRecord("n2", "nu2", entry("ns", "db-0", "db-0", "p2", true)))
	poll(t, "db-0 on n2", func() bool { return h.index("ns")["db-0"] == "n2" })
	poll(t, "n1's claim no longer indexed", func() bool { c := h.claim("n1", "ns", "db-0"); return c != nil && !c.Indexed })
	poll(t, "n2's claim indexed", func() bool { c := h.claim("n2", "ns", "db-0"); return c != nil && c.Indexed })
	if c := h.claim("n1", "ns", "db-0"); !c.Accepted() || c.PodUID != "p1" {
		t.Fatalf("n1's claim %+v: still accepted for its pod", c)
	}
}

// A deleted Node's entries leave the index at once; its record goes once
// the Node has been gone NodeGrace. A Node registered again under a new
// UID counts none of the record's entries written for the old one.
func TestNodeGone(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), node("n2", "nu2"), pod("ns", "a-0", "p1", "n1", 0), pod("ns", "b-0", "p2", "n2", 0))
	cfg := testConfig()
	cfg.NodeGrace = 2 * time.Second
	h.ready(cfg)
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "a-0", "a-0", "p1", true)))
	h.srv.PutRecord(nodeRecord("n2", "nu2", entry("ns", "b-0", "b-0", "p2", true)))
	poll(t, "both in the index", func() bool { return len(h.index("ns")) == 2 })

	if err := h.kube.Tracker().Delete(nodesGVR, "", "n1"); err != nil {
		t.Fatal(err)
	}
	poll(t, "a-0 out of the index", func() bool { _, ok := h.index("ns")["a-0"]; return !ok })
	if h.srv.Record("n1") == nil {
		t.Fatal("the record went before its grace")
	}
	poll(t, "n1's record deleted", func() bool { return h.srv.Record("n1") == nil })

	if err := h.kube.Tracker().Delete(nodesGVR, "", "n2"); err != nil {
		t.Fatal(err)
	}
	h.create(node("n2", "nu2-again"))
	poll(t, "b-0 out of the index", func() bool { _, ok := h.index("ns")["b-0"]; return !ok })
	if h.srv.Record("n2") == nil {
		t.Fatal("the record of a Node that is back was deleted")
	}
	// The node writes its record again under its new UID: judged afresh.
	h.srv.PutRecord(nodeRecord("n2", "nu2-again", entry("ns", "b-0", "b-0", "p2", true)))
	poll(t, "b-0 back in the index", func() bool { return h.index("ns")["b-0"] == "n2" })
	poll(t, "the status judged under the new UID", func() bool { return h.srv.Record("n2").Status.NodeUID == "nu2-again" })
	if n := h.srv.Writes("delete", apitest.Records); n != 1 {
		t.Fatalf("%d record deletions, want 1", n)
	}
}

// A shard the API server refuses to write is tried again until it is
// written; meanwhile the claim is accepted, and not said to be indexed.
func TestShardWriteRetried(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0))
	h.ready(testConfig())
	h.failShards("create", 500)
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	poll(t, "the claim accepted", func() bool { c := h.claim("n1", "ns", "db-0"); return c != nil && c.Accepted() })
	if c := h.claim("n1", "ns", "db-0"); c.Indexed || len(h.shards("ns")) != 0 {
		t.Fatalf("claim %+v indexed, shards %d, with every shard write refused", c, len(h.shards("ns")))
	}
	h.failShards("create", 0)
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	poll(t, "the claim indexed", func() bool { return h.claim("n1", "ns", "db-0").Indexed })
}

// A Node being deleted counts for nothing, however long its deletion takes:
// a finalizer (which a token a node can mint may put on it through
// nodes/status) or a dependent blocking a foreground deletion can hold it
// Terminating for ever, and its entries must leave the index at once all
// the same.
func TestNodeTerminatingStopsCounting(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), node("n2", "nu2"), pod("ns", "a-0", "p1", "n1", 0), pod("ns", "b-0", "p2", "n2", 0))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "a-0", "a-0", "p1", true)))
	h.srv.PutRecord(nodeRecord("n2", "nu2", entry("ns", "b-0", "b-0", "p2", true)))
	poll(t, "both in the index", func() bool { return len(h.index("ns")) == 2 })
	held := node("n1", "nu1")
	now := metav1.Now()
	held.DeletionTimestamp, held.Finalizers = &now, []string{"example.com/hold"}
	if err := h.kube.Tracker().Update(nodesGVR, held, ""); err != nil {
		t.Fatal(err)
	}
	poll(t, "a-0 out of the index while n1 is Terminating", func() bool { _, ok := h.index("ns")["a-0"]; return !ok })
	if h.index("ns")["b-0"] != "n2" {
		t.Fatalf("b-0 left the index with n1's deletion: %v", h.index("ns"))
	}
}

// A pod named db and another pod whose stickyip.io/identity is db are two
// identities on two nodes: each series' shard maps the key db to its own
// node, and neither shard holds the other's.
func TestSeriesKeepNamesAndKeysApart(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), node("n2", "nu2"), pod("ns", "db", "p1", "n1", 0),
		pod("ns", "cache-x1", "p2", "n2", 0, annotated("stickyip.io/identity", "db")))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db", "db", "p1", true)))
	h.srv.PutRecord(nodeRecord("n2", "nu2", entry("ns", "identity:db", "cache-x1", "p2", true)))
	poll(t, "both in the index", func() bool { return len(h.index("ns")) == 2 })
	got := map[string]map[string]string{}
	for _, cm := range h.shards("ns") {
		got[cm.Name+" "+cm.Labels[placementv1.IndexLabel]] = cm.Data
	}
	want := map[string]map[string]string{
		"stickyip-placement-names-0 names": {"db": "n1"},
		"stickyip-placement-keyed-0 keyed": {"db": "n2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("shards %v, want %v", got, want)
	}
}

// A ConfigMap that has a shard's name but not its label (made before the
// stickyip-index-writer policy) becomes the shard: labelled, holding
// exactly the index, nothing of what it held before.
func TestUnlabelledShardAdopted(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), pod("ns", "db-0", "p1", "n1", 0),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stickyip-placement-names-0"},
			Data: map[string]string{"db-0": "n9", "web-0": "n9"}, BinaryData: map[string][]byte{"x": {1}}})
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "p1", true)))
	poll(t, "the claim indexed", func() bool { c := h.claim("n1", "ns", "db-0"); return c != nil && c.Indexed })
	s := h.shards("ns")
	if len(s) != 1 || s[0].Labels[placementv1.IndexLabel] != placementv1.Names || !reflect.DeepEqual(s[0].Data, map[string]string{"db-0": "n1"}) || s[0].BinaryData != nil {
		t.Fatalf("shards %+v", s)
	}
}
