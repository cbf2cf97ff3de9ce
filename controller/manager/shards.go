package manager

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/index"
)

// syncNamespace makes namespace's shards hold its index (each identity's
// winner) with one write per shard that differs, and returns the nodes
// that won or lost an identity (their records' Indexed changes). Until
// every write succeeded, the index counts as it was.
func (m *Manager) syncNamespace(ctx context.Context, namespace string) (map[string]bool, error) {
	want := m.st.want(namespace)
	writes, objs := m.plan(namespace, want)
	for _, w := range writes {
		name := placementv1.ShardName(w.series, w.Number)
		if err := m.writeShard(ctx, namespace, w.series, w.Write, objs[name]); err != nil {
			return nil, fmt.Errorf("namespace %s, shard %s: %w", namespace, name, err)
		}
	}
	nodes := m.st.setWinners(namespace, want)
	m.metrics.identities.Set(float64(m.st.identities))
	return nodes, nil
}

// shardWrite is one write to a shard of series.
type shardWrite struct {
	series string
	index.Write
}

// plan returns the writes that make namespace's shards hold the index
// want, each series packed alone, and the shards as they stand, by name.
func (m *Manager) plan(namespace string, want map[string]string) ([]shardWrite, map[string]*corev1.ConfigMap) {
	have, objs := m.shardsOf(namespace)
	bySeries := splitSeries(want)
	var out []shardWrite
	for _, series := range []string{placementv1.Names, placementv1.Keyed} {
		for _, w := range index.Plan(have[series], bySeries[series], placementv1.ShardBytes) {
			out = append(out, shardWrite{series, w})
		}
	}
	return out, objs
}

// splitSeries returns the index want (identity to node) as each series'
// keys to nodes (placementv1.ShardKey).
func splitSeries(want map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{placementv1.Names: {}, placementv1.Keyed: {}}
	for id, node := range want {
		series, key := placementv1.ShardKey(id)
		out[series][key] = node
	}
	return out
}

// writeShard makes one write; cur is the shard as it stands (nil: none).
func (m *Manager) writeShard(ctx context.Context, namespace, series string, w index.Write, cur *corev1.ConfigMap) error {
	name := placementv1.ShardName(series, w.Number)
	cms := m.kube.CoreV1().ConfigMaps(namespace)
	var out *corev1.ConfigMap
	var err error
	switch w.Op {
	case index.Create:
		out, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{placementv1.IndexLabel: series}},
			Data:       w.Nodes}, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			out, err = m.adoptShard(ctx, namespace, name, series, w.Nodes)
		}
	case index.Patch:
		var body []byte
		if body, err = w.MergePatch(); err != nil {
			return err
		}
		out, err = cms.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	case index.Delete:
		uid := cur.UID
		err = cms.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		m.shardView.deleted(namespace+"/"+name, uid)
		err = nil
	}
	if err != nil {
		return err
	}
	if out != nil {
		m.shardView.put(namespace+"/"+name, out)
	}
	m.metrics.indexWrites.WithLabelValues(string(w.Op)).Inc()
	return nil
}

// adoptShard makes the ConfigMap of a shard's name, which exists without
// the shard's label (the informer sees only labelled ones: made before
// the stickyip-index-writer policy, or its label taken off by an
// administrator), the shard: its label and exactly the data nodes.
func (m *Manager) adoptShard(ctx context.Context, namespace, name, series string, nodes map[string]string) (*corev1.ConfigMap, error) {
	cms := m.kube.CoreV1().ConfigMaps(namespace)
	cur, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cur = cur.DeepCopy()
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels[placementv1.IndexLabel] = series
	cur.Data, cur.BinaryData = maps.Clone(nodes), nil
	m.log.Warn("an unlabelled ConfigMap had a shard's name: made it the shard", "namespace", namespace, "name", name,
		"keys", len(cur.Data))
	return cms.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fieldManager})
}

// fieldManager names the controller's writes in managedFields.
const fieldManager = "stickyip-controller"
