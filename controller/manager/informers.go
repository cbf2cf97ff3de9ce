package manager

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

// key is one change to handle: a record (by name), or a namespace.
type key struct {
	namespace bool
	name      string
}

func recordKey(name string) key  { return key{name: name} }
func namespaceKey(ns string) key { return key{namespace: true, name: ns} }
func (m *Manager) enqueue(k key) { m.queue.Add(k) }
func (m *Manager) enqueueRecords(names []string) {
	for _, n := range names {
		m.enqueue(recordKey(n))
	}
}

// informers makes the five informers, each keeping only what the
// controller reads (facts.Transform; no managedFields anywhere).
func (m *Manager) informers() error {
	m.factory = informers.NewSharedInformerFactory(m.kube, 0)
	m.pods = m.factory.Core().V1().Pods().Informer()
	m.sets = m.factory.Apps().V1().StatefulSets().Informer()
	m.nodes = m.factory.Core().V1().Nodes().Informer()
	m.records = cache.NewSharedIndexInformer(m.api.RecordsListWatch(), &placementv1.NodeRecord{}, 0, cache.Indexers{})
	// The shards: ConfigMaps with the index's label, and no other.
	m.shardFactory = informers.NewSharedInformerFactoryWithOptions(m.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = placementv1.IndexLabel }))
	m.shards = m.shardFactory.Core().V1().ConfigMaps().Informer()
	for _, inf := range []cache.SharedIndexInformer{m.pods, m.sets, m.nodes} {
		if err := inf.SetTransform(facts.Transform); err != nil {
			return err
		}
	}
	for _, inf := range []cache.SharedIndexInformer{m.records, m.shards} {
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return err
		}
	}
	return m.handlers()
}

func dropManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// deleted unwraps an informer's delete notification.
func deleted(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// handlers turns the informers' notifications into keys: a pod or a
// StatefulSet judges again the records that follow it; a Node its record
// (only when it comes, goes, or comes back under another UID: not at every
// heartbeat); a record itself; a shard its namespace.
func (m *Manager) handlers() error {
	var errs []error
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandlerFuncs) {
		_, err := inf.AddEventHandler(h)
		errs = append(errs, err)
	}
	add(m.pods, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.podChanged(obj) },
		UpdateFunc: func(_, obj any) { m.podChanged(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := deleted(obj).(*facts.Pod); ok {
				m.enqueueRecords(m.seen.podDeleted(p, time.Now()))
			}
		},
	})
	add(m.sets, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.setChanged(obj) },
		UpdateFunc: func(_, obj any) { m.setChanged(obj) },
		DeleteFunc: func(obj any) {
			if s, ok := deleted(obj).(*facts.StatefulSet); ok {
				m.enqueueRecords(m.seen.setDeleted(s, time.Now()))
			}
		},
	})
	add(m.nodes, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.nodeChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { m.nodeChanged(old, obj) },
		DeleteFunc: func(obj any) {
			if n, ok := deleted(obj).(*facts.Node); ok {
				m.seen.nodeGone(n.Name, time.Now())
				m.enqueue(recordKey(n.Name))
				m.queue.AddAfter(recordKey(n.Name), m.cfg.NodeGrace)
			}
		},
	})
	add(m.records, m.objectHandlers(func(o any) (string, types.UID, bool) {
		r, ok := o.(*placementv1.NodeRecord)
		if !ok {
			return "", "", false
		}
		m.enqueue(recordKey(r.Name))
		return r.Name, r.UID, true
	}, m.recordView.forget))
	add(m.shards, m.objectHandlers(func(o any) (string, types.UID, bool) {
		x, ok := o.(*corev1.ConfigMap)
		if !ok {
			return "", "", false
		}
		m.enqueue(namespaceKey(x.Namespace))
		return x.Namespace + "/" + x.Name, x.UID, true
	}, m.shardView.forget))
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// objectHandlers enqueues what touch keys of each notification; a
// deletion also makes the overlay forget the object.
func (m *Manager) objectHandlers(touch func(any) (string, types.UID, bool), forget func(string, types.UID)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { touch(obj) },
		UpdateFunc: func(_, obj any) { touch(obj) },
		DeleteFunc: func(obj any) {
			if k, uid, ok := touch(deleted(obj)); ok {
				forget(k, uid)
			}
		},
	}
}

func (m *Manager) podChanged(obj any) {
	if p, ok := obj.(*facts.Pod); ok {
		m.enqueueRecords(m.seen.podChanged(p))
	}
}

func (m *Manager) setChanged(obj any) {
	if s, ok := obj.(*facts.StatefulSet); ok {
		m.enqueueRecords(m.seen.setChanged(s.Namespace + "/" + s.Name))
	}
}

func (m *Manager) nodeChanged(old, obj any) {
	n, ok := obj.(*facts.Node)
	if !ok {
		return
	}
	if o, ok := old.(*facts.Node); ok && o.UID == n.UID && (o.DeletionTimestamp == nil) == (n.DeletionTimestamp == nil) {
		return
	}
	m.seen.nodeBack(n.Name)
	m.enqueue(recordKey(n.Name))
}
