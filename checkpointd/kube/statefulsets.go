package kube

import (
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
)

// statefulSetInformer lists and watches every StatefulSet of the cluster:
// one watch for the node, whatever their number (what the node's
// StatefulSet pods' reservations follow may be any of them, and a watch
// filtered by name cannot name several). Each is kept as
// apiclient.StatefulSet, its metadata cut to what identifies it and its
// deletion: the pod template is never decoded, nor kept.
func (c *Client) statefulSetInformer() cache.SharedIndexInformer {
	i := cache.NewSharedIndexInformer(c.cs.ListWatchStatefulSets(), &apiclient.StatefulSet{}, 0, cache.Indexers{})
	_ = i.SetTransform(func(o any) (any, error) {
		if s, ok := o.(*apiclient.StatefulSet); ok {
			s.ManagedFields, s.Annotations, s.Labels, s.OwnerReferences, s.Finalizers = nil, nil, nil, nil, nil
		}
		return o, nil
	})
	_ = i.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		var status apierrors.APIStatus
		if errors.As(err, &status) && c.setsErr.first(err) {
			// Forbidden: deploy/placement's RBAC is not applied (or was
			// removed): StatefulSet pods' reservations keep their fixed
			// durations meanwhile.
			c.opts.Log.Warn("StatefulSet watch refused by the API server: reservations follow no StatefulSet until it is allowed (deploy/placement's RBAC)",
				"err", err)
		}
	})
	return i
}

// StatefulSet returns StatefulSet namespace/name as the watch last saw it
// (nil: it does not exist), and whether the watch has listed the cluster's
// StatefulSets at least once (false: nothing is known, and nil says
// nothing). With the API server away the last view stays: a StatefulSet
// deleted meanwhile is seen gone only once the watch lists again.
func (c *Client) StatefulSet(namespace, name string) (*apiclient.StatefulSet, bool) {
	if c.sets == nil || !c.sets.HasSynced() {
		return nil, false
	}
	o, ok, err := c.sets.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, true
	}
	s, _ := o.(*apiclient.StatefulSet)
	return s, true
}

// StatefulSetsSynced reports whether the StatefulSets' watch has listed
// them at least once (false without Options.StatefulSets).
func (c *Client) StatefulSetsSynced() bool { return c.sets != nil && c.sets.HasSynced() }

// errorOnce remembers the last error logged, so that a refusal repeated at
// every retry is logged once.
type errorOnce struct {
	mu   sync.Mutex
	last string
}

// first reports whether err differs from the last one given.
func (e *errorOnce) first(err error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err.Error() == e.last {
		return false
	}
	e.last = err.Error()
	return true
}
