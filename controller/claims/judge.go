package claims

import (
	"fmt"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

// Judge returns the verdict on in.Entry (the table of the package doc).
func Judge(in Input) Result {
	e := in.Entry
	base := placementv1.Claim{Namespace: e.Namespace, Identity: e.Identity}
	if p := in.Prev; p != nil && p.Accepted() {
		base.Pod, base.PodUID, base.Created = p.Pod, p.PodUID, p.Created
		if p.PodUID == e.PodUID {
			return Result{Claim: base, Outcome: Kept}
		}
	}
	pod := in.Pod
	if pod != nil && !in.DeletedAt.IsZero() && in.Now.Sub(in.DeletedAt) >= in.TombstoneTTL {
		pod = nil // deleted too long ago to be told from a made-up entry
	}
	if pod == nil {
		return unknown(in, base)
	}
	rule, why := check(in.Node, e, pod)
	switch {
	case rule == "":
		base.Pod, base.PodUID, base.Created, base.Refused = pod.Name, pod.UID, pod.CreationTimestamp, ""
		return Result{Claim: base, Outcome: Accepted}
	case pod.NodeName == "":
		return pending(in, base, rule, why)
	}
	return refuse(in, base, rule, why)
}

// check applies the rules to a pod of the entry's UID: the rule it breaks
// and why ("": none).
func check(node string, e placementv1.Entry, pod *facts.Pod) (rule, why string) {
	switch {
	case pod.Namespace != e.Namespace:
		return RuleNamespace, fmt.Sprintf("the pod of that uid is in namespace %s", pod.Namespace)
	case pod.Name != e.Pod:
		return RuleName, fmt.Sprintf("the pod of that uid is named %s", pod.Name)
	case pod.NodeName == "":
		return RuleNode, "not bound to any node"
	case pod.NodeName != node:
		return RuleNode, fmt.Sprintf("bound to node %s, not %s", pod.NodeName, node)
	case pod.Mirror:
		return RuleMirror, "a mirror pod (kubernetes.io/config.mirror): a node makes those of any name"
	case pod.NodeOwned:
		return RuleNodeOwner, "owned by a Node: a node makes those of any name"
	case pod.Identity() != e.Identity:
		return RuleIdentity, fmt.Sprintf("its identity is %s, not %s", pod.Identity(), e.Identity)
	}
	return "", ""
}

// unknown judges an entry whose pod the controller does not know.
func unknown(in Input, base placementv1.Claim) Result {
	e := in.Entry
	if in.Former {
		base.Pod, base.PodUID, base.Created, base.Refused = e.Pod, e.PodUID, e.Since, ""
		return Result{Claim: base, Outcome: Imported}
	}
	why := "no such pod"
	if n := in.Named; n != nil && n.Namespace == e.Namespace && n.Name == e.Pod && n.UID != e.PodUID {
		why = fmt.Sprintf("no such pod; %s/%s is uid %s", n.Namespace, n.Name, n.UID)
	}
	return pending(in, base, RuleUnknown, why)
}

// pending keeps what was there before (an earlier accepted pod, a
// refusal) while the pod is waited for: the cache may not have seen the
// pod, or its binding, yet. Waited for PendingFor, it is refused.
func pending(in Input, base placementv1.Claim, rule, why string) Result {
	since := in.PendingSince
	if since.IsZero() {
		since = in.Now
	}
	if in.Now.Sub(since) >= in.PendingFor {
		return refuse(in, base, rule, why)
	}
	if in.Prev != nil {
		base.Refused = in.Prev.Refused
	}
	return Result{Claim: base, Outcome: Pending, RetryAt: since.Add(in.PendingFor)}
}

// refuse refuses the entry's pod; base keeps the earlier accepted one.
func refuse(in Input, base placementv1.Claim, rule, why string) Result {
	e := in.Entry
	base.Refused = fmt.Sprintf("pod %s/%s (uid %s): %s", e.Namespace, e.Pod, e.PodUID, why)
	return Result{Claim: base, Outcome: Refused, Rule: rule}
}
