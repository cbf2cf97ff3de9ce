//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// The placement API as the tests read it (every read is the
// administrator's) and write it (with the credentials the test names).

var (
	recordsGVR = placementv1.SchemeGroupVersion.WithResource(placementv1.NodeRecordResource)
	// indexGVR is the shards' resource: ConfigMaps.
	indexGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
)

// recordOf returns node's NodeRecord as admin reads it (nil: none).
func (cp *controlPlane) recordOf(node string) *placementv1.NodeRecord {
	cp.t.Helper()
	u, err := cp.dynamicAs(cp.adminToken).Resource(recordsGVR).Get(context.Background(), node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		cp.t.Fatalf("read %s's NodeRecord: %v", node, err)
	}
	return typedRecord(cp, u)
}

func typedRecord(cp *controlPlane, u *unstructured.Unstructured) *placementv1.NodeRecord {
	var r placementv1.NodeRecord
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
		cp.t.Fatalf("NodeRecord %s: %v", u.GetName(), err)
	}
	return &r
}

// indexIn returns namespace ns's placement index as the hint reads it:
// identity → node, over every shard.
func (cp *controlPlane) indexIn(ns string) map[string]string {
	cp.t.Helper()
	l, err := cp.client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: placementv1.IndexLabel})
	if err != nil {
		cp.t.Fatalf("list namespace %s's placement index: %v", ns, err)
	}
	out := map[string]string{}
	for _, cm := range l.Items {
		placementv1.MergeShard(out, cm.Labels[placementv1.IndexLabel], cm.Data)
	}
	return out
}

// hinted names the node the index gives identity of ns ("": none).
func (cp *controlPlane) hinted(ns, identity string) string { return cp.indexIn(ns)[identity] }

// waitHinted waits until the index gives identity of ns to node ("": to
// none) and returns how long that took.
func (cp *controlPlane) waitHinted(ns, identity, node string, within time.Duration) time.Duration {
	cp.t.Helper()
	start := time.Now()
	eventually(cp.t, fmt.Sprintf("the index giving %s/%s to %q", ns, identity, node), within, 100*time.Millisecond, func() (bool, string) {
		got := cp.hinted(ns, identity)
		return got == node, fmt.Sprintf("it gives it to %q", got)
	})
	return time.Since(start)
}

// claimOf returns the controller's verdict on node's entry of identity in
// ns (nil: none yet).
func (cp *controlPlane) claimOf(node, ns, identity string) *placementv1.Claim {
	r := cp.recordOf(node)
	if r == nil {
		return nil
	}
	for i := range r.Status.Claims {
		if c := &r.Status.Claims[i]; c.Namespace == ns && c.Identity == identity {
			return c
		}
	}
	return nil
}

// waitRefused waits until the controller refuses node's claim of identity
// in ns and returns its reason.
func (cp *controlPlane) waitRefused(node, ns, identity string, within time.Duration) string {
	cp.t.Helper()
	var why string
	eventually(cp.t, fmt.Sprintf("the controller refusing %s's claim of %s/%s", node, ns, identity), within, 100*time.Millisecond, func() (bool, string) {
		c := cp.claimOf(node, ns, identity)
		if c == nil {
			return false, "no verdict yet"
		}
		why = c.Refused
		return why != "" && !c.Indexed, fmt.Sprintf("%+v", *c)
	})
	return why
}

// entriesOf returns node's entries as its record holds them, by
// namespace/identity.
func (cp *controlPlane) entriesOf(node string) map[string]placementv1.Entry {
	out := map[string]placementv1.Entry{}
	if r := cp.recordOf(node); r != nil {
		for _, e := range r.Spec.Entries {
			out[e.Namespace+"/"+e.Identity] = e
		}
	}
	return out
}

// recordsAs is the NodeRecords resource with token's identity.
func (cp *controlPlane) recordsAs(token string) dynamic.NamespaceableResourceInterface {
	return cp.dynamicAs(token).Resource(recordsGVR)
}

// indexAs is namespace ns's ConfigMaps (the shards' resource) with
// token's identity.
func (cp *controlPlane) indexAs(token, ns string) dynamic.ResourceInterface {
	return cp.dynamicAs(token).Resource(indexGVR).Namespace(ns)
}

// recordObject is a NodeRecord named name with entries, as unstructured.
func recordObject(name, nodeUID string, entries ...placementv1.Entry) *unstructured.Unstructured {
	r := &placementv1.NodeRecord{TypeMeta: metav1.TypeMeta{APIVersion: placementv1.SchemeGroupVersion.String(), Kind: placementv1.NodeRecordKind},
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: placementv1.NodeRecordSpec{NodeUID: types.UID(nodeUID), Entries: entries}}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// recordEntry is an entry of a running pod pod (UID uid) of ns holding
// identity with addresses.
func recordEntry(ns, identity, pod, uid string, addresses ...string) placementv1.Entry {
	return placementv1.Entry{Namespace: ns, Identity: identity, Pod: pod, PodUID: types.UID(uid),
		Since: metav1.NewTime(time.Now().Truncate(time.Second)), Addresses: addresses}
}

// identitiesIn lists the identities of an index, sorted, for messages.
func identitiesIn(index map[string]string) string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(index)) {
		out = append(out, id+"→"+index[id])
	}
	return strings.Join(out, " ")
}

// podEntry is the entry a node's checkpointd publishes for pod ns/pod
// holding identity at addresses: its UID read as admin (empty when the
// pod does not exist).
func (cp *controlPlane) podEntry(ns, identity, pod string, addresses ...string) placementv1.Entry {
	e := recordEntry(ns, identity, pod, "", addresses...)
	if p, err := cp.client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{}); err == nil {
		e.PodUID = p.UID
	}
	return e
}

// writeEntriesAs makes node's NodeRecord hold entries (replacing its
// entries of the same identities, keeping the others), written with the
// node's own credentials as its checkpointd writes it: a merge patch of
// the spec, or a creation.
func (cp *controlPlane) writeEntriesAs(node string, remove []string, entries ...placementv1.Entry) error {
	cp.t.Helper()
	ctx := context.Background()
	r := cp.recordsAs(cp.tokens[nodeUser(node)])
	var cur []placementv1.Entry
	if rec := cp.recordOf(node); rec != nil {
		cur = rec.Spec.Entries
	}
	key := func(e placementv1.Entry) string { return e.Namespace + "/" + e.Identity }
	drop := map[string]bool{}
	for _, k := range remove {
		drop[k] = true
	}
	for _, e := range entries {
		drop[key(e)] = true
	}
	var next []placementv1.Entry
	for _, e := range cur {
		if !drop[key(e)] {
			next = append(next, e)
		}
	}
	next = append(next, entries...)
	slices.SortFunc(next, func(a, b placementv1.Entry) int { return strings.Compare(key(a), key(b)) })
	obj := recordObject(node, string(cp.nodeUID(node)), next...)
	if cp.recordOf(node) == nil {
		_, err := r.Create(ctx, obj, metav1.CreateOptions{})
		return err
	}
	spec, _ := json.Marshal(map[string]any{"spec": obj.Object["spec"]})
	_, err := r.Patch(ctx, node, types.MergePatchType, spec, metav1.PatchOptions{})
	return err
}

// claimAs adds entry to node's record with its credentials and waits
// until the controller judged it: nil once the index gives its identity
// to node, the controller's refusal otherwise (or the API server's).
func (cp *controlPlane) claimAs(node string, e placementv1.Entry) error {
	cp.t.Helper()
	if err := cp.writeEntriesAs(node, nil, e); err != nil {
		return err
	}
	var verdict error
	eventually(cp.t, fmt.Sprintf("the controller's verdict on %s's claim of %s/%s", node, e.Namespace, e.Identity), 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		c := cp.claimOf(node, e.Namespace, e.Identity)
		switch {
		case c == nil:
			return false, "none yet"
		case c.Refused != "" && c.PodUID != e.PodUID:
			verdict = fmt.Errorf("claim refused: %s", c.Refused)
			return true, ""
		case c.PodUID == e.PodUID && cp.hinted(e.Namespace, e.Identity) == node:
			verdict = nil
			return true, ""
		}
		return false, fmt.Sprintf("%+v; index %s", *c, identitiesIn(cp.indexIn(e.Namespace)))
	})
	return verdict
}

// releaseAs removes node's entry of identity in ns from its record, with
// its credentials.
func (cp *controlPlane) releaseAs(node, ns, identity string) {
	cp.t.Helper()
	if err := cp.writeEntriesAs(node, []string{ns + "/" + identity}); err != nil {
		cp.t.Fatalf("%s releasing %s/%s: %v", node, ns, identity, err)
	}
}

// runtimeToUnstructured is v as the unstructured map the API's JSON gives.
func runtimeToUnstructured(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
