package manager

import (
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/retention"
)

// retain returns the retention of accepted claim c of namespace (before:
// its retention as decided for the same pod), and notes what it follows:
// the StatefulSet, and the pod while it lives.
func (m *Manager) retain(namespace string, c *placementv1.Claim, before *placementv1.Retention, f *follows) *placementv1.Retention {
	pod, deletedAt := m.pod(c.PodUID)
	gone := pod == nil || !deletedAt.IsZero()
	name := ""
	if pod != nil {
		if ref := pod.Controller(); ref != nil && ref.Kind == "StatefulSet" {
			name = ref.Name
		}
	}
	if name == "" && before != nil {
		name = before.Name
	}
	if name == "" {
		return nil
	}
	in := retention.Input{PodName: c.Pod, Pod: pod, Gone: gone, Prev: before, Set: m.set(namespace, name)}
	if before != nil {
		in.Deletion = m.seen.deletion(before.UID)
		in.Orphans = func() bool { return m.orphans(namespace, before.Name, before.UID) }
	}
	// Followed whatever the decision: a StatefulSet not cached yet, or a
	// pod adopted later, changes it.
	f.sets = append(f.sets, namespace+"/"+name)
	if !gone {
		f.pods = append(f.pods, c.PodUID)
	}
	return retention.Decide(in)
}
