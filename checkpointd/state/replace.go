package state

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The NoExecute taints the node lifecycle controller puts on a node it no
// longer hears from (Ready Unknown) or that reports itself not ready.
const (
	TaintUnreachable = "node.kubernetes.io/unreachable"
	TaintNotReady    = "node.kubernetes.io/not-ready"
)

// Replacement says when the control plane may run a replacement of a pod
// elsewhere once the pod's node is cut off from it.
type Replacement struct {
	// Never: nothing replaces the pod while this node holds it.
	Never bool
	// After: the pod may have been replaced once the node has been out of
	// contact with the API server this long (when not Never).
	After time.Duration
	// Why names the rule that applied, for logs and docs.
	Why string
}

// ReplacementOf is the partition rule, per owner kind, judged on a pod's
// saved spec:
//
//   - no ownerReference (a bare pod): Never. The taint manager may delete
//     the pod object, but nothing creates another one.
//   - controlled by an apps StatefulSet: Never. The StatefulSet controller
//     creates a pod of the same name only once the old pod object is gone,
//     which needs this node's kubelet (or an operator's force delete, or the
//     node.kubernetes.io/out-of-service taint: the operator's act).
//   - controlled by an apps DaemonSet: Never. Its replacement would run on
//     this node only (and its pods tolerate both taints forever).
//   - any other owner (ReplicaSet, ReplicationController, Job, and every
//     kind checkpointd does not know: the conservative side): the
//     controller starts a replacement as soon as the taint manager deletes
//     the pod, which is when its NoExecute toleration for the unreachable
//     or not-ready taint runs out, counted from the taint (which comes
//     after node-monitor-grace-period, ignored here: conservative). The
//     shorter of the two applies: tolerationSeconds (the
//     DefaultTolerationSeconds admission plugin sets 300 s on pods that
//     set neither); a toleration without tolerationSeconds is Never; no
//     matching toleration is 0: replaced at once.
func ReplacementOf(pod *corev1.Pod) Replacement {
	owner := controllerOf(pod)
	switch {
	case len(pod.OwnerReferences) == 0:
		return Replacement{Never: true, Why: "bare pod: nothing replaces it"}
	case owner != nil && appsGroup(owner.APIVersion) && owner.Kind == "StatefulSet":
		return Replacement{Never: true, Why: "StatefulSet pod: not replaced while this node holds it"}
	case owner != nil && appsGroup(owner.APIVersion) && owner.Kind == "DaemonSet":
		return Replacement{Never: true, Why: "DaemonSet pod: replaced on this node only"}
	}
	kind := "owner without a controller reference"
	if owner != nil {
		kind = owner.Kind
	}
	after, never := time.Duration(-1), true
	for _, key := range []string{TaintUnreachable, TaintNotReady} {
		d, forever := tolerates(pod.Spec.Tolerations, key)
		if forever {
			continue
		}
		never = false
		if after < 0 || d < after {
			after = d
		}
	}
	if never {
		return Replacement{Never: true, Why: kind + " pod tolerating an unreachable node forever"}
	}
	return Replacement{After: after, Why: kind + " pod: replaced once its unreachable/not-ready toleration runs out"}
}

// controllerOf returns the pod's controller ownerReference, or nil.
func controllerOf(pod *corev1.Pod) *metav1.OwnerReference {
	for i := range pod.OwnerReferences {
		if o := &pod.OwnerReferences[i]; o.Controller != nil && *o.Controller {
			return o
		}
	}
	return nil
}

// appsGroup reports whether apiVersion is in the "apps" API group.
func appsGroup(apiVersion string) bool {
	group, _, found := strings.Cut(apiVersion, "/")
	return found && group == "apps"
}

// tolerates returns how long tolerations keep a pod on a node with the
// NoExecute taint key, as the taint manager reads them: the first matching
// toleration counts; without tolerationSeconds it is forever; no match, or
// tolerationSeconds ≤ 0, is 0 (evicted at once).
func tolerates(tolerations []corev1.Toleration, key string) (time.Duration, bool) {
	for _, t := range tolerations {
		if !matches(t, key) {
			continue
		}
		if t.TolerationSeconds == nil {
			return 0, true
		}
		return max(time.Duration(*t.TolerationSeconds)*time.Second, 0), false
	}
	return 0, false
}

// matches reports whether t tolerates the NoExecute taint key (with no
// value, as the node lifecycle controller sets it).
func matches(t corev1.Toleration, key string) bool {
	if t.Effect != "" && t.Effect != corev1.TaintEffectNoExecute {
		return false
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		return t.Key == "" || t.Key == key
	case corev1.TolerationOpEqual, "":
		return t.Key == key && t.Value == ""
	}
	return false
}
