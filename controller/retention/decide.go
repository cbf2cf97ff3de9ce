package retention

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

// setRef returns the StatefulSet controller reference of pod and the
// pod's ordinal in it; nil when the pod has none, or a name the
// StatefulSet does not give.
func setRef(pod *facts.Pod) (*metav1.OwnerReference, int) {
	if pod == nil {
		return nil, 0
	}
	ref := pod.Controller()
	if ref == nil || ref.APIVersion != "apps/v1" || ref.Kind != "StatefulSet" {
		return nil, 0
	}
	ordinal, ok := contract.StatefulSetOrdinal(pod.Name, ref.Name)
	if !ok {
		return nil, 0
	}
	return ref, ordinal
}

// same reports whether set is the StatefulSet of name and uid.
func same(set *facts.StatefulSet, name string, uid types.UID) bool {
	return set != nil && set.Name == name && set.UID == uid
}

// follow returns which StatefulSet the claim follows and what owns the
// pod's volume claims: recomputed from the StatefulSet while the pod
// exists and the StatefulSet is not being deleted, frozen otherwise.
func follow(in Input) (placementv1.Retention, bool) {
	if in.Pod != nil && in.Pod.Fixed {
		return placementv1.Retention{}, false
	}
	prev := in.Prev
	ref, ordinal := setRef(in.Pod)
	switch {
	case ref != nil && (!in.Gone || prev == nil):
		r := placementv1.Retention{Name: ref.Name, UID: ref.UID}
		frozen := prev != nil && prev.UID == ref.UID
		switch {
		case same(in.Set, ref.Name, ref.UID) && (in.Set.DeletionTimestamp == nil || !frozen):
			r.Owner = Owner(in.Set, ordinal)
		case frozen:
			r.Owner = prev.Owner
		default:
			return placementv1.Retention{}, false // its StatefulSet was never seen
		}
		return r, true
	case prev != nil:
		return placementv1.Retention{Name: prev.Name, UID: prev.UID, Owner: prev.Owner}, true
	}
	return placementv1.Retention{}, false
}

// verdict sets r's Verdict and Why (the package doc).
func verdict(in Input, r *placementv1.Retention) {
	pod, set := in.PodName, r.Name
	hold := func(why string, a ...any) { r.Verdict, r.Why = placementv1.Hold, clip(fmt.Sprintf(why, a...)) }
	release := func(why string, a ...any) { r.Verdict, r.Why = placementv1.Release, clip(fmt.Sprintf(why, a...)) }
	switch r.Owner {
	case placementv1.OwnerPod:
		if in.Gone {
			release("pod %s left StatefulSet %s's ordinals (whenScaled: Delete): its volume claims went with it", pod, set)
		} else {
			hold("pod %s is out of StatefulSet %s's ordinals (whenScaled: Delete): released once the pod is gone", pod, set)
		}
		return
	case "":
		hold("nothing deletes the volume claims of pod %s (StatefulSet %s): kept until a new pod %s takes the address back or `stickyip release` ends it", pod, set, pod)
		return
	}
	s := in.Set
	switch {
	case same(s, set, r.UID) && s.DeletionTimestamp == nil:
		hold("kept while StatefulSet %s (uid %s) exists: deleting it (whenDeleted: Delete) releases it, unless with --cascade=orphan", set, r.UID)
	case same(s, set, r.UID) && s.Orphaning():
		r.Owner = ""
		hold("StatefulSet %s is being deleted with --cascade=orphan: the volume claims of pod %s stay; kept until a new pod %s takes the address back or `stickyip release` ends it", set, pod, pod)
	case same(s, set, r.UID):
		release("StatefulSet %s is being deleted (whenDeleted: Delete): the volume claims of pod %s go with it", set, pod)
	case in.Deletion == Orphaned || (in.Deletion == Unseen && in.Orphans != nil && in.Orphans()):
		r.Owner = ""
		hold("StatefulSet %s (uid %s) was deleted with --cascade=orphan: the volume claims of pod %s stay; kept until a new pod %s takes the address back or `stickyip release` ends it", set, r.UID, pod, pod)
	default:
		release("StatefulSet %s (uid %s) was deleted (whenDeleted: Delete): the volume claims of pod %s went with it", set, r.UID, pod)
	}
}

// maxWhy is the schema's bound on Why.
const maxWhy = 512

func clip(s string) string {
	if len(s) > maxWhy {
		return s[:maxWhy-3] + "..."
	}
	return s
}

// Orphans reports whether a pod of StatefulSet name (uid, gone) shows that
// it was deleted with orphan propagation: a live pod of one of its names
// (name-<ordinal>) without a controller (the garbage collector stripped
// it), or adopted by current, a later StatefulSet of the name, that it
// predates (a pod current made would be newer than current).
func Orphans(name string, uid types.UID, pods []*facts.Pod, current *facts.StatefulSet) bool {
	for _, p := range pods {
		if _, ok := contract.StatefulSetOrdinal(p.Name, name); !ok || p.DeletionTimestamp != nil {
			continue
		}
		ref := p.Controller()
		if ref == nil {
			return true
		}
		if same(current, name, ref.UID) && ref.UID != uid && ref.Kind == "StatefulSet" &&
			p.CreationTimestamp.Before(&current.CreationTimestamp) {
			return true
		}
	}
	return false
}
