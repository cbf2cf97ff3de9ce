//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// TestPlacement applies deploy/placement to a real kube-apiserver
// (Node,RBAC authorization, NodeRestriction) as its README says — the API,
// the policies and stickyip-controller's rights, the probe refused, then
// the nodes' grant — runs stickyip-controller beside the API server with
// its ServiceAccount's credentials, and checks, with the nodes' own
// credentials and a namespace administrator's:
//   - records: a node writes only the NodeRecord named after it, on every
//     write path, with no ownerReferences or finalizers; never its status,
//     never the index (recordRules);
//   - claims: the controller indexes an entry whose pod is bound to the
//     node that lists it, and refuses, with an Event, one for a pod bound
//     elsewhere, a pod a node made, a keyed identity the pod does not carry
//     (claimsChecked);
//   - a node may not give its pod another identity through pods/status
//     (podIdentityRule); a namespace's administrator writes no index and no
//     record (namespaceUserRules);
//   - the hint: the index's node, preferred or required, the pod's own
//     terms kept, other pods untouched, the later pod winning (hints);
//   - checkpointd on node1 (real kubelet, containerd and CNI chain): a
//     sticky pod's entry at ADD, its end at DEL, gone at expiry, three
//     writes of the record (publisherLifecycle);
//   - the namespace opt-in (placement_optin_test.go);
//   - a Node deleted: its entries leave the index in seconds (nodeRemoved).
func TestPlacement(t *testing.T) {
	n := newCheckpointdNode(t)
	ctx := context.Background()
	n.startControlPlane()
	n.ensureNamespace("db")
	n.applyPlacement()
	n.startPlacementController()
	n.startContainerd()
	n.startKubelet(true)
	// node2 exists only as a Node object, a credential and the pods bound
	// to it (which nothing runs).
	if _, err := n.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node2Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{testPod("db-0", nil), testPod("queue-7d9f8-b", map[string]string{annIdentity: "queue"}), testPod("own-b", nil)} {
		p.Namespace = "db"
		if p.Name != "db-0" {
			p.Spec.NodeName = node2Name
		}
		if _, err := n.client.CoreV1().Pods("db").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n.waitPodRunningIn("db", "db-0", 2*time.Minute)
	if err := n.claimAs(nodeName, n.podEntry("db", "db-0", "db-0", "10.244.1.50")); err != nil {
		t.Fatalf("node1 claiming db-0, its own pod: %v", err)
	}
	if err := n.claimAs(node2Name, n.podEntry("db", "identity:queue", "queue-7d9f8-b", "10.244.2.51")); err != nil {
		t.Fatalf("node2 claiming identity:queue for its pod queue-7d9f8-b, which carries the key: %v", err)
	}
	n.recordRules()
	n.claimsChecked()
	n.podIdentityRule()
	n.namespaceUserRules()
	n.hints()
	n.publisherLifecycle()
	n.namespaceOptIn()
	n.nodeRemoved()
}

// recordRules: what node2's credentials may do to node1's record, to its
// own, to the records' status and to the index; each refusal beside the
// same write on what node2 may change, taken (the control that the body
// reaches the rule), and node1's record the same after all of it.
func (n *node) recordRules() {
	t := n.t
	ctx := context.Background()
	admin := n.recordsAs(n.adminToken)
	r2 := n.recordsAs(n.tokens[nodeUser(node2Name)])
	before := n.recordOf(nodeName)
	const notOwn = "may write only its own NodeRecord"
	setEntries := func(u *unstructured.Unstructured) {
		e := n.podEntry("db", "db-0", "own-b", "10.244.2.3")
		m, _ := runtimeToUnstructured(e)
		_ = unstructured.SetNestedSlice(u.Object, []any{m}, "spec", "entries")
	}
	// node1's record, on every path.
	refusedEverywhere(t, "node2", "rewrite node1's entries", r2, admin, nodeName, setEntries, notOwn)
	refusedEverywhere(t, "node2", "set node1's record's Node UID to its own", r2, admin, nodeName, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, string(n.nodeUID(node2Name)), "spec", "nodeUID")
	}, notOwn)
	refusedEverywhere(t, "node2", "label node1's record", r2, admin, nodeName, func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"x": "y"}) }, notOwn)
	refusedEverywhere(t, "node2", "delete node1's record", r2, admin, nodeName, nil, notOwn)
	// The same writes on its own record are taken: the body reaches the rule.
	_, err := r2.Patch(ctx, node2Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	requireAccepted(t, "node2 labelling its own record", err)
	// Another name, made up or generated.
	_, err = r2.Create(ctx, recordObject("node3", "00000000-0000-0000-0000-000000000003"), metav1.CreateOptions{})
	requireRefused(t, "node2 creating a record of another name", err, notOwn)
	gen := recordObject("", "00000000-0000-0000-0000-000000000003")
	gen.SetGenerateName(node2Name)
	_, err = r2.Create(ctx, gen, metav1.CreateOptions{})
	requireRefused(t, "node2 creating a record with generateName "+node2Name, err, notOwn)
	// Its own record's metadata: nothing that reaches another object.
	yes := true
	refusedEverywhere(t, "node2", "put an ownerReference to node1's Node on its record", r2, admin, node2Name, func(u *unstructured.Unstructured) {
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: n.nodeUID(nodeName), BlockOwnerDeletion: &yes}})
	}, "no ownerReferences and no finalizers")
	refusedEverywhere(t, "node2", "put a finalizer on its record", r2, admin, node2Name, func(u *unstructured.Unstructured) {
		u.SetFinalizers([]string{"example.com/keep"})
	}, "no ownerReferences and no finalizers")
	// The controller's status and the index are no node's.
	_, err = r2.Patch(ctx, node2Name, types.MergePatchType, []byte(`{"status":{"nodeUID":"x"}}`), metav1.PatchOptions{}, "status")
	requireRefused(t, "node2 writing its record's status", err, rbacRefusal("patch", "noderecords/status"))
	_, err = n.indexAs(n.tokens[nodeUser(node2Name)], "db").Create(ctx, indexObject("db", shard9, map[string]string{"db-0": node2Name}), metav1.CreateOptions{})
	requireRefused(t, "node2 creating an index shard", err, rbacRefusal("create", "configmaps"))
	// A member of system:nodes that is no node, and the probe.
	_, err = n.recordsAs(n.tokens[nodesGroupUser]).Create(ctx, recordObject(nodesGroupUser, "00000000-0000-0000-0000-000000000004"), metav1.CreateOptions{})
	requireRefused(t, nodesGroupUser+" (in system:nodes) creating a record of its name", err, notOwn)
	_, err = admin.Create(ctx, recordObject(placementv1.ProbeName, "00000000-0000-0000-0000-000000000000"), metav1.CreateOptions{})
	requireRefused(t, "an administrator creating the probe", err, probeRefused)

	after := n.recordOf(nodeName)
	if fmt.Sprint(after.Spec) != fmt.Sprint(before.Spec) || n.hinted("db", "db-0") != nodeName {
		t.Fatalf("node1's record after node2's refused writes: %+v, hint %q; want %+v and node1", after.Spec, n.hinted("db", "db-0"), before.Spec)
	}
	t.Log("node2: every write of node1's record refused on every path, its own record's ownerReferences and finalizers refused; node1's entry unchanged")
}

// claimsChecked: node2 lists, in its own record, entries no pod bound to it
// backs; the controller refuses each, naming why, and posts an Event on
// the record; none reaches the index.
func (n *node) claimsChecked() {
	t := n.t
	ctx := context.Background()
	c2 := n.clientAs(n.tokens[nodeUser(node2Name)])
	yes := true
	mirror := testPod("web-"+node2Name, map[string]string{annIdentity: "web", "kubernetes.io/config.mirror": "x"})
	mirror.Namespace, mirror.Spec.NodeName = "db", node2Name
	mirror.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node2Name, UID: n.nodeUID(node2Name), Controller: &yes}}
	if _, err := c2.CoreV1().Pods("db").Create(ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node2 creating a mirror pod (NodeRestriction lets a kubelet): %v", err)
	}
	for _, c := range []struct {
		what  string
		entry placementv1.Entry
	}{
		{"db-0, bound to node1", n.podEntry("db", "db-0", "db-0", "10.244.2.3")},
		{"db-0 for its pod own-b", n.podEntry("db", "db-0", "own-b", "10.244.2.3")},
		{"identity:other for its pod own-b, which carries no key", n.podEntry("db", "identity:other", "own-b", "10.244.2.3")},
		{"identity:web for the mirror pod it made", n.podEntry("db", "identity:web", "web-"+node2Name, "10.244.2.4")},
		{"web-" + node2Name + " for that mirror pod", n.podEntry("db", "web-"+node2Name, "web-"+node2Name, "10.244.2.4")},
	} {
		err := n.claimAs(node2Name, c.entry)
		if err == nil || !strings.HasPrefix(err.Error(), "claim refused:") {
			t.Errorf("node2 claiming %s: %v, want refused by the controller", c.what, err)
		} else {
			t.Logf("node2 claiming %s: %v", c.what, err)
		}
		n.releaseAs(node2Name, c.entry.Namespace, c.entry.Identity)
	}
	if got := n.hinted("db", "db-0"); got != nodeName {
		t.Errorf("db-0 in the index after node2's refused claims: %q, want node1", got)
	}
	eventually(t, "an Event on node2's record for a refused claim", time.Minute, time.Second, func() (bool, string) {
		evs, err := n.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeRecord,involvedObject.name=" + node2Name})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "ClaimRefused" {
				t.Logf("Event on NodeRecord %s: %s: %s", node2Name, e.Reason, e.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events, none ClaimRefused", len(evs.Items))
	})
}

// podIdentityRule: node2 may not give its pod own-b the key queue through
// pods/status, which would let it claim identity:queue for it; it may
// change another annotation there (the control).
func (n *node) podIdentityRule() {
	t := n.t
	ctx := context.Background()
	c2 := n.clientAs(n.tokens[nodeUser(node2Name)])
	set := func(key, value string) error {
		p, err := c2.CoreV1().Pods("db").Get(ctx, "own-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
		_, err = c2.CoreV1().Pods("db").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}
	requireAccepted(t, "node2 setting another annotation of its pod own-b through pods/status", set("example.com/seen", "yes"))
	requireRefused(t, "node2 giving its pod own-b the key queue through pods/status", set(annIdentity, "queue"),
		"a node may not change a pod's stickyip.io/identity")
}

// shard9 is a shard's name no test's index reaches.
var shard9 = placementv1.ShardName(placementv1.Names, 9)

// namespaceUserRules: the administrator of namespace db (the default admin
// role bound there, which grants ConfigMaps) writes no shard of its index
// and no record: stickyip-index-writer refuses the shards, and the same
// write of a ConfigMap of its own is taken (the control).
func (n *node) namespaceUserRules() {
	t := n.t
	ctx := context.Background()
	tok := n.namespaceAdminToken("db")
	cms := n.indexAs(tok, "db")
	_, err := cms.Create(ctx, indexObject("db", shard9, map[string]string{"db-0": node2Name}), metav1.CreateOptions{})
	requireRefused(t, "db's administrator creating an index shard", err, indexWriterRefusal(shard9))
	own := indexObject("db", "own-settings", map[string]string{"db-0": node2Name})
	own.SetLabels(nil)
	_, err = cms.Create(ctx, own, metav1.CreateOptions{})
	requireAccepted(t, "db's administrator creating a ConfigMap of its own with the same data", err)
	_, err = cms.Patch(ctx, "own-settings", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+placementv1.IndexLabel+`":"names"}}}`), metav1.PatchOptions{})
	requireRefused(t, "db's administrator labelling its ConfigMap as a shard", err, indexWriterRefusal("own-settings"))
	if err := cms.Delete(ctx, "own-settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	shard, patch := shardPatch("db-0", node2Name)
	_, err = cms.Patch(ctx, shard, types.MergePatchType, patch, metav1.PatchOptions{})
	requireRefused(t, "db's administrator pointing db-0 at node2", err, indexWriterRefusal(shard))
	_, err = n.recordsAs(tok).Create(ctx, recordObject(node2Name, "00000000-0000-0000-0000-000000000002"), metav1.CreateOptions{})
	requireRefused(t, "db's administrator writing a record", err, rbacRefusal("create", "noderecords"))
}

// publisherLifecycle: checkpointd on node1 with the real CNI chain puts a
// sticky pod's entry in node1's record at its ADD, writes its
// reservation's end at DEL and removes it at expiry, and nothing for a
// plain pod; the index follows.
func (n *node) publisherLifecycle() {
	t := n.t
	// The record node1 wrote by hand above goes: checkpointd writes it from
	// its store.
	if err := n.recordsAs(n.adminToken).Delete(context.Background(), nodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.startCheckpointd()
	const reserve = 20 * time.Second
	start := time.Now()
	n.createPod(testPod("web", map[string]string{annReservation: reserve.String()}))
	n.createPod(testPod("plain", nil))
	ip := n.waitAPIPodRunning("web", 2*time.Minute)
	n.waitAPIPodRunning("plain", 2*time.Minute)
	var claimed time.Duration
	eventually(t, "node1's entry of default/web, indexed", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		e, ok := n.entriesOf(nodeName)["default/web"]
		if !ok || e.Pod != "web" || !slices.Equal(e.Addresses, []string{ip}) || !e.Running() {
			return false, fmt.Sprintf("entry %+v", e)
		}
		claimed = time.Since(start)
		return n.hinted("default", "web") == nodeName, "not in the index yet"
	})
	t.Logf("publisher: default/web (%s) in node1's record and the index %s after the pod's creation", ip, claimed.Round(100*time.Millisecond))
	if e, ok := n.entriesOf(nodeName)["default/plain"]; ok {
		t.Errorf("a pod without reservation got an entry: %+v", e)
	}
	n.deletePodGracefully("web", time.Minute)
	deleted := time.Now()
	expires := deleted.Add(reserve)
	eventually(t, "the reservation's end in default/web's entry", reserve/2, 200*time.Millisecond, func() (bool, string) {
		e, ok := n.entriesOf(nodeName)["default/web"]
		return ok && e.Until != nil && e.Until.After(deleted.Add(reserve-5*time.Second)) && e.Until.Time.Before(deleted.Add(reserve+5*time.Second)),
			fmt.Sprintf("%+v", e)
	})
	eventually(t, "default/web released at expiry, out of the index", reserve+30*time.Second, 500*time.Millisecond, func() (bool, string) {
		e, ok := n.entriesOf(nodeName)["default/web"]
		return !ok && n.hinted("default", "web") == "", fmt.Sprintf("%+v", e)
	})
	t.Logf("publisher: entry released %s after expiry", time.Since(expires).Round(100*time.Millisecond))
	writes := map[string]string{}
	for _, kind := range []string{placement.WriteClaim, placement.WriteUpdate, placement.WriteRelease} {
		v, err := n.metric(`checkpointd_placement_writes_total{kind="` + kind + `"}`)
		if err != nil {
			t.Fatal(err)
		}
		writes[kind] = v
	}
	if writes[placement.WriteClaim] != "1" || writes[placement.WriteUpdate] != "1" || writes[placement.WriteRelease] != "1" {
		t.Errorf("record writes for one sticky pod's lifecycle and one plain pod: %v, want one claim, one update (DEL), one release", writes)
	}
	t.Logf("publisher: record writes for one sticky pod lifecycle (ADD, DEL, expiry) and one plain pod: %v", writes)
}

// indexObject is a ConfigMap ns/name with keys, labelled as a shard of
// the series its name gives (names, when the name is no shard's).
func indexObject(ns, name string, keys map[string]string) *unstructured.Unstructured {
	series, _, ok := placementv1.ParseShardName(name)
	if !ok {
		series = placementv1.Names
	}
	m := map[string]any{}
	for k, v := range keys {
		m[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{placementv1.IndexLabel: series}},
		"data":     m,
	}}
}
