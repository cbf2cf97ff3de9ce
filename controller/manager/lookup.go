package manager

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
	"github.com/stickyip/stickyip/controller/index"
	"github.com/stickyip/stickyip/controller/retention"
)

// record returns NodeRecord name as the controller knows it (nil: none).
func (m *Manager) record(name string) *placementv1.NodeRecord {
	obj, ok, _ := m.records.GetStore().GetByKey(name)
	cached, _ := obj.(*placementv1.NodeRecord)
	r, ok := m.recordView.view(name, cached, ok && cached != nil)
	if !ok {
		return nil
	}
	return r
}

// node returns Node name (nil: none, or being deleted). A Node being
// deleted counts for nothing: a finalizer or a blocking dependent can hold
// it for ever, and its entries must not.
func (m *Manager) node(name string) *facts.Node {
	obj, ok, _ := m.nodes.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	n, _ := obj.(*facts.Node)
	if n != nil && n.DeletionTimestamp != nil {
		return nil
	}
	return n
}

// pod returns the pod of uid: live (deletedAt zero), or as last seen
// before its deletion; nil when the controller does not know it. The
// pods' cache is keyed by namespace and name, and seen maps UIDs to keys:
// an index of the informer would cost a set per pod.
func (m *Manager) pod(uid types.UID) (pod *facts.Pod, deletedAt time.Time) {
	if k := m.seen.podKey(uid); k != "" {
		if obj, ok, _ := m.pods.GetStore().GetByKey(k); ok {
			if p, ok := obj.(*facts.Pod); ok && p.UID == uid {
				return p, time.Time{}
			}
		}
	}
	return m.seen.tomb(uid)
}

// podNamed returns the live pod namespace/name (nil: none).
func (m *Manager) podNamed(namespace, name string) *facts.Pod {
	obj, ok, _ := m.pods.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	p, _ := obj.(*facts.Pod)
	return p
}

// set returns StatefulSet namespace/name (nil: none).
func (m *Manager) set(namespace, name string) *facts.StatefulSet {
	if name == "" {
		return nil
	}
	obj, ok, _ := m.sets.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	s, _ := obj.(*facts.StatefulSet)
	return s
}

// orphans reports whether StatefulSet namespace/name of uid (gone, its
// deletion unseen) left pods behind (retention.Orphans). It reads every
// pod of the cache, once a pass per StatefulSet: it is asked only after a
// restart missed the deletion.
func (m *Manager) orphans(namespace, name string, uid types.UID) bool {
	k := string(uid)
	if v, ok := m.orphanMemo[k]; ok {
		return v
	}
	var pods []*facts.Pod
	for _, obj := range m.pods.GetStore().List() {
		if p, ok := obj.(*facts.Pod); ok && p.Namespace == namespace && strings.HasPrefix(p.Name, name+"-") {
			pods = append(pods, p)
		}
	}
	v := retention.Orphans(name, uid, pods, m.set(namespace, name))
	m.orphanMemo[k] = v
	return v
}

// shardsOf returns namespace's shards as the controller knows them, by
// series, and their objects by name. ConfigMaps whose names are no
// shard's, or whose label names another series, are left alone.
func (m *Manager) shardsOf(namespace string) (map[string][]index.Shard, map[string]*corev1.ConfigMap) {
	objs, _ := m.shards.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	known := map[string]bool{}
	byKey := map[string]*corev1.ConfigMap{}
	for _, obj := range objs {
		x, ok := obj.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		k := namespace + "/" + x.Name
		known[k] = true
		if v, ok := m.shardView.view(k, x, true); ok {
			byKey[k] = v
		}
	}
	for k := range m.shardView.extra(func(k string) bool { return strings.HasPrefix(k, namespace+"/") }, known) {
		if v, ok := m.shardView.view(k, nil, false); ok {
			byKey[k] = v
		}
	}
	have := map[string][]index.Shard{}
	out := map[string]*corev1.ConfigMap{}
	for _, x := range byKey {
		if series, n, ok := placementv1.ParseShardName(x.Name); ok && x.Labels[placementv1.IndexLabel] == series {
			have[series] = append(have[series], index.Shard{Number: n, Nodes: x.Data})
			out[x.Name] = x
		}
	}
	return have, out
}
