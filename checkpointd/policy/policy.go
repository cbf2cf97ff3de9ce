// Package policy is the node operator's say over what checkpointd may turn
// into a static pod. A static pod is kubelet-critical, cannot be evicted and
// can be removed by nobody but the owner of its file, so the pod's author
// (who merely adds an opt-in annotation) must not decide alone: the operator
// lists the namespaces whose pods may be checkpointed, and separately the
// namespaces whose pods may carry node-level power into a copy.
//
// Node-level power is what the Pod Security Standards' baseline profile
// forbids (see baseline.go, one check per control, in every init, regular
// and ephemeral container), plus gitRepo and flexVolume volumes, which run
// node-side code on the pod's behalf.
//
// Refused in every namespace, privileged ones too: pods whose parent could
// run at the same time as its copy (hostNetwork, host ports: see overlap.go),
// pods the kubelet would not restart (restartPolicy other than Always) and
// pods that need the API server to run (persistent volume claims, generic
// ephemeral volumes, resource claims).
package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/podspec"
)

// Refusal reasons, short and stable: they label metrics and Events.
const (
	ReasonNamespace     = "namespace-not-allowed"
	ReasonPrivileged    = "privileged"
	ReasonRestartPolicy = "restart-policy"
	ReasonUnsupported   = "needs-api-server"
	ReasonOverlap       = "parent-and-copy-overlap"
)

// Policy is the operator's allowlist.
type Policy struct {
	// Namespaces whose opted-in pods may be checkpointed ("*": all).
	Namespaces []string
	// PrivilegedNamespaces whose pods may also carry node-level power ("*": all).
	PrivilegedNamespaces []string
}

// Parse builds a Policy from the comma-separated flag values.
func Parse(namespaces, privileged string) (Policy, error) {
	p := Policy{Namespaces: split(namespaces), PrivilegedNamespaces: split(privileged)}
	for _, ns := range p.PrivilegedNamespaces {
		if !p.namespaceAllowed(ns) {
			return Policy{}, fmt.Errorf("--allow-privileged-namespaces names %q, which --allow-namespaces does not allow", ns)
		}
	}
	return p, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

func (p Policy) namespaceAllowed(ns string) bool {
	return slices.Contains(p.Namespaces, "*") || slices.Contains(p.Namespaces, ns)
}

func (p Policy) privilegedAllowed(ns string) bool {
	return slices.Contains(p.PrivilegedNamespaces, "*") || slices.Contains(p.PrivilegedNamespaces, ns)
}

// String describes the policy for the start-up log.
func (p Policy) String() string {
	return fmt.Sprintf("namespaces=%s privileged=%s", orNone(p.Namespaces), orNone(p.PrivilegedNamespaces))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// Verdict is the policy's answer for one pod.
type Verdict struct {
	Allowed bool
	// Reason is one of the Reason constants when refused.
	Reason string
	// Detail says what exactly is refused, for people.
	Detail string
}

// Evaluate judges pod (the parent's spec, as the API server has it).
func (p Policy) Evaluate(pod *corev1.Pod) Verdict {
	refuse := func(reason, format string, args ...any) Verdict {
		return Verdict{Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if !p.namespaceAllowed(pod.Namespace) {
		return refuse(ReasonNamespace, "namespace %q is not in --allow-namespaces (%s)", pod.Namespace, orNone(p.Namespaces))
	}
	if rp := pod.Spec.RestartPolicy; rp != "" && rp != corev1.RestartPolicyAlways {
		return refuse(ReasonRestartPolicy, "restartPolicy is %s: the kubelet would not run it again, a static copy would", rp)
	}
	if needs := podspec.NeedsAPIServer(pod); len(needs) > 0 {
		return refuse(ReasonUnsupported, "it cannot run without the API server: %s", strings.Join(needs, "; "))
	}
	if overlap := Overlap(pod); len(overlap) > 0 {
		return refuse(ReasonOverlap, "its copy and the pod itself could run at the same time when the API server is back (%s); refused in every namespace",
			strings.Join(overlap, "; "))
	}
	if power := NodePower(pod); len(power) > 0 && !p.privilegedAllowed(pod.Namespace) {
		return refuse(ReasonPrivileged, "it would give a static copy node-level power (%s) and namespace %q is not in --allow-privileged-namespaces (%s)",
			joinFindings(power), pod.Namespace, orNone(p.PrivilegedNamespaces))
	}
	return Verdict{Allowed: true}
}
