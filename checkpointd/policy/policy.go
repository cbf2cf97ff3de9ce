// Package policy is the node operator's say over what checkpointd may turn
// into a static pod. A static pod is kubelet-critical, cannot be evicted and
// can be removed by nobody but the owner of its file, so the pod's author
// (who merely adds an opt-in annotation) must not decide alone: the operator
// lists the namespaces whose pods may be checkpointed, and separately the
// namespaces whose pods may carry node-level power into a copy.
//
// Node-level power is what the Pod Security Standards' baseline profile
// forbids (privileged containers, host namespaces, hostPath volumes, host
// ports, unmasked /proc, unconfined seccomp or AppArmor, custom SELinux
// users, roles and types, unsafe sysctls, Windows host processes) and, more
// strictly than baseline, any added capability.
//
// Pods the kubelet would not restart (restartPolicy other than Always) and
// pods that need the API server to run (persistent volume claims, generic
// ephemeral volumes, resource claims) are refused too.
package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Refusal reasons, short and stable: they label metrics and Events.
const (
	ReasonNamespace     = "namespace-not-allowed"
	ReasonPrivileged    = "privileged"
	ReasonRestartPolicy = "restart-policy"
	ReasonUnsupported   = "needs-api-server"
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
	if needs := NeedsAPIServer(pod); len(needs) > 0 {
		return refuse(ReasonUnsupported, "it cannot run without the API server: %s", strings.Join(needs, "; "))
	}
	if power := NodePower(pod); len(power) > 0 && !p.privilegedAllowed(pod.Namespace) {
		return refuse(ReasonPrivileged, "it would give a static copy node-level power (%s) and namespace %q is not in --allow-privileged-namespaces (%s)",
			strings.Join(power, "; "), pod.Namespace, orNone(p.PrivilegedNamespaces))
	}
	return Verdict{Allowed: true}
}

// NeedsAPIServer lists what in pod cannot be resolved without the API server.
func NeedsAPIServer(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, fmt.Sprintf("volume %q is a persistentVolumeClaim", v.Name))
		case v.Ephemeral != nil:
			out = append(out, fmt.Sprintf("volume %q is a generic ephemeral volume", v.Name))
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		out = append(out, "it uses resource claims")
	}
	return out
}

// safeSysctls are the sysctls the Pod Security Standards allow at baseline.
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced": true, "net.ipv4.ip_local_port_range": true, "net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.tcp_syncookies": true, "net.ipv4.ping_group_range": true, "net.ipv4.ip_local_reserved_ports": true,
	"net.ipv4.tcp_keepalive_time": true, "net.ipv4.tcp_fin_timeout": true, "net.ipv4.tcp_keepalive_intvl": true,
	"net.ipv4.tcp_keepalive_probes": true,
}

// seLinuxTypes are the SELinux types baseline allows.
var seLinuxTypes = map[string]bool{"": true, "container_t": true, "container_init_t": true, "container_kvm_t": true, "container_engine_t": true}

// NodePower lists what in pod would give a static copy node-level power.
func NodePower(pod *corev1.Pod) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	s := &pod.Spec
	if s.HostNetwork {
		add("hostNetwork")
	}
	if s.HostPID {
		add("hostPID")
	}
	if s.HostIPC {
		add("hostIPC")
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			add("hostPath volume %q (%s)", v.Name, v.HostPath.Path)
		}
	}
	if sc := s.SecurityContext; sc != nil {
		out = append(out, seccompAppArmorSELinux("pod", sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)...)
		if sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
			add("pod is a Windows host process")
		}
		for _, sy := range sc.Sysctls {
			if !safeSysctls[sy.Name] {
				add("unsafe sysctl %s", sy.Name)
			}
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/") && v == "unconfined" {
			add("AppArmor unconfined (%s)", k)
		}
	}
	for _, c := range allContainers(s) {
		where := fmt.Sprintf("container %q", c.Name)
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				add("%s hostPort %d", where, p.HostPort)
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("%s is privileged", where)
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			caps := make([]string, len(sc.Capabilities.Add))
			for i, c := range sc.Capabilities.Add {
				caps[i] = string(c)
			}
			add("%s adds capabilities %s", where, strings.Join(caps, ","))
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			add("%s has an unmasked /proc", where)
		}
		if sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
			add("%s is a Windows host process", where)
		}
		out = append(out, seccompAppArmorSELinux(where, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)...)
	}
	return out
}

func seccompAppArmorSELinux(where string, sp *corev1.SeccompProfile, ap *corev1.AppArmorProfile, se *corev1.SELinuxOptions) []string {
	var out []string
	if sp != nil && sp.Type == corev1.SeccompProfileTypeUnconfined {
		out = append(out, where+" seccomp Unconfined")
	}
	if ap != nil && ap.Type == corev1.AppArmorProfileTypeUnconfined {
		out = append(out, where+" AppArmor Unconfined")
	}
	if se != nil && (se.User != "" || se.Role != "" || !seLinuxTypes[se.Type]) {
		out = append(out, where+" custom SELinux user, role or type")
	}
	return out
}

func allContainers(s *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range s.InitContainers {
		out = append(out, &s.InitContainers[i])
	}
	for i := range s.Containers {
		out = append(out, &s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		out = append(out, (*corev1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}
