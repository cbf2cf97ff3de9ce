package manager

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/index"
)

// syncNamespace makes namespace's shards hold its index (each identity's
// winner) with one write per shard that differs, and returns the nodes
// that won or lost an identity (their records' Indexed changes). Until
// every write succeeded, the index counts as it was.
func (m *Manager) syncNamespace(ctx context.Context, namespace string) (map[string]bool, error) {
	want := m.st.want(namespace)
	have, objs := m.shardsOf(namespace)
	for _, w := range index.Plan(have, want, placementv1.ShardBytes) {
		if err := m.writeShard(ctx, namespace, w, objs[w.Number]); err != nil {
			return nil, fmt.Errorf("namespace %s, shard %s: %w", namespace, placementv1.ShardName(w.Number), err)
		}
	}
	nodes := m.st.setWinners(namespace, want)
	m.metrics.identities.Set(float64(m.st.identities))
	return nodes, nil
}

// writeShard makes one write; cur is the shard as it stands (nil: none).
func (m *Manager) writeShard(ctx context.Context, namespace string, w index.Write, cur *placementv1.PlacementIndex) error {
	name := placementv1.ShardName(w.Number)
	k := namespace + "/" + name
	label := strconv.Itoa(w.Number)
	switch w.Op {
	case index.Create:
		out, err := m.api.CreateIndex(ctx, &placementv1.PlacementIndex{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{placementv1.IndexLabel: label}},
			Spec:       placementv1.PlacementIndexSpec{Nodes: w.Nodes}})
		if err != nil {
			return err
		}
		m.shardView.put(k, out)
	case index.Patch:
		body, err := w.MergePatch()
		if err != nil {
			return err
		}
		if cur.Labels[placementv1.IndexLabel] != label {
			body = append([]byte(`{"metadata":{"labels":{"`+placementv1.IndexLabel+`":"`+label+`"}},`), body[1:]...)
		}
		out, err := m.api.PatchIndex(ctx, namespace, name, body)
		if err != nil {
			return err
		}
		m.shardView.put(k, out)
	case index.Delete:
		if err := m.api.DeleteIndex(ctx, namespace, name, cur.UID); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		m.shardView.deleted(k, cur.UID)
	}
	m.metrics.indexWrites.WithLabelValues(string(w.Op)).Inc()
	return nil
}
