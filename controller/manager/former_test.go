package manager

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// formerShard is shard i of the former index of namespace, with each
// node's lines.
func formerShard(namespace string, i int, lines map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "stickyip-index-" + strconv.Itoa(i)}, Data: lines}
}

// During an upgrade, a reservation whose pod is gone is accepted on the
// node's own line in the former index, counted from the entry's since;
// another node's line backs nothing.
func TestImportFormerIndex(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), formerShard("ns", 3, map[string]string{
		"n1": "db-0 db-0 7 2026-11-30T10:00:00.000Z 2026-12-30T10:00:00.000Z 10.0.0.5\nkv-0 kv-0 8 2026-11-30T10:00:00.000Z - 10.0.0.6",
		"n2": "web-0 web-0 9 2026-11-30T10:00:00.000Z 2026-12-30T10:00:00.000Z 10.0.0.7"}))
	h.ready(importing())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "gone-1", false), entry("ns", "web-0", "web-0", "gone-2", false),
		entry("ns", "other-0", "other-0", "gone-3", false)))
	poll(t, "db-0 in the index", func() bool { return h.index("ns")["db-0"] == "n1" })
	poll(t, "db-0's claim indexed", func() bool { c := h.claim("n1", "ns", "db-0"); return c != nil && c.Indexed })
	c := h.claim("n1", "ns", "db-0")
	if c.PodUID != "gone-1" || !c.Created.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Fatalf("imported claim %+v: want the entry's pod and since", c)
	}
	poll(t, "web-0 and other-0 refused", func() bool {
		a, b := h.claim("n1", "ns", "web-0"), h.claim("n1", "ns", "other-0")
		return a != nil && b != nil && a.Refused != "" && b.Refused != ""
	})
	if idx := h.index("ns"); len(idx) != 1 {
		t.Fatalf("index %v", idx)
	}
	// The former shards are read once for the namespace, all eight.
	gets := 0
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "configmaps" {
			gets++
		}
	}
	if gets != 8 {
		t.Fatalf("%d reads of the former shards, want 8", gets)
	}
}

// Without the right to read the former shards the import stops for good,
// at the first 403: nothing is accepted from it, and it is not asked again.
func TestImportStopsWhenForbidden(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"))
	var gets atomic.Int32
	h.kube.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "stickyip-index-0", errors.New("RBAC"))
	})
	h.ready(importing())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("a", "db-0", "db-0", "gone-1", false), entry("b", "db-0", "db-0", "gone-2", false)))
	poll(t, "both refused", func() bool {
		a, b := h.claim("n1", "a", "db-0"), h.claim("n1", "b", "db-0")
		return a != nil && b != nil && strings.Contains(a.Refused, "no such pod") && strings.Contains(b.Refused, "no such pod")
	})
	if n := gets.Load(); n != 1 {
		t.Fatalf("%d reads of the former shards after a 403, want 1", n)
	}
}

// importing is the test configuration of an upgrade from the former index.
func importing() Config {
	cfg := testConfig()
	cfg.ImportFormerIndex = true
	return cfg
}

// Out of an upgrade (the default) the former shards back nothing and are
// never read: once their policy is gone, a namespace's editors may write
// ConfigMaps of their names.
func TestNoImportByDefault(t *testing.T) {
	h := newHarness(t, node("n1", "nu1"), formerShard("ns", 0, map[string]string{
		"n1": "db-0 db-0 7 2026-11-30T10:00:00.000Z 2026-12-30T10:00:00.000Z 10.0.0.5"}))
	h.ready(testConfig())
	h.srv.PutRecord(nodeRecord("n1", "nu1", entry("ns", "db-0", "db-0", "gone-1", false)))
	poll(t, "db-0 refused", func() bool {
		c := h.claim("n1", "ns", "db-0")
		return c != nil && strings.Contains(c.Refused, "no such pod")
	})
	if _, ok := h.index("ns")["db-0"]; ok {
		t.Fatal("db-0 indexed on a former line with the import off")
	}
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == configMapsGVR {
			t.Fatalf("a former shard read with the import off: %v", a)
		}
	}
}
