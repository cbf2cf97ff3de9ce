package policy

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/podspec"
)

// The controls NodePower checks: the Pod Security Standards baseline
// profile as of Kubernetes 1.36 (named by the check IDs of
// k8s.io/pod-security-admission), and checkpointd's own additions.
const (
	ControlHostProcess    = "hostProcess"
	ControlHostNamespaces = "hostNamespaces"
	ControlPrivileged     = "privileged"
	ControlCapabilities   = "capabilities"
	ControlHostPath       = "hostPathVolumes"
	ControlHostPorts      = "hostPorts"
	ControlAppArmor       = "appArmorProfile"
	ControlSELinux        = "seLinuxOptions"
	ControlProcMount      = "procMount"
	ControlSeccomp        = "seccompProfile"
	ControlSysctls        = "sysctls"
	ControlProbeHost      = "hostProbesAndHostLifecycle"
	ControlGitRepo        = "gitRepoVolumes"    // baseline since 1.31
	ControlFlexVolume     = "flexVolumeVolumes" // checkpointd's own: a node-side driver runs for the pod
)

// Finding is one setting of a pod that gives a copy node-level power.
type Finding struct {
	// Control is one of the Control constants.
	Control string
	// What names the field and its value.
	What string
}

func (f Finding) String() string { return f.Control + ": " + f.What }

func joinFindings(fs []Finding) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return strings.Join(s, "; ")
}

// baselineCapabilities are the capabilities baseline lets a container add
// (the container runtimes' default set).
var baselineCapabilities = map[corev1.Capability]bool{
	"AUDIT_WRITE": true, "CHOWN": true, "DAC_OVERRIDE": true, "FOWNER": true, "FSETID": true, "KILL": true, "MKNOD": true,
	"NET_BIND_SERVICE": true, "SETFCAP": true, "SETGID": true, "SETPCAP": true, "SETUID": true, "SYS_CHROOT": true,
}

// safeSysctls are the sysctls baseline allows (the kubelet's safe set, 1.32+).
var safeSysctls = map[string]bool{
	"kernel.shm_rmid_forced": true, "net.ipv4.ip_local_port_range": true, "net.ipv4.ip_unprivileged_port_start": true,
	"net.ipv4.tcp_syncookies": true, "net.ipv4.ping_group_range": true, "net.ipv4.ip_local_reserved_ports": true,
	"net.ipv4.tcp_keepalive_time": true, "net.ipv4.tcp_fin_timeout": true, "net.ipv4.tcp_keepalive_intvl": true,
	"net.ipv4.tcp_keepalive_probes": true, "net.ipv4.tcp_rmem": true, "net.ipv4.tcp_wmem": true,
}

// seLinuxTypes are the SELinux types baseline allows (1.31+).
var seLinuxTypes = map[string]bool{"": true, "container_t": true, "container_init_t": true, "container_kvm_t": true, "container_engine_t": true}

// NodePower lists what in pod would give a static copy node-level power:
// every baseline control it fails, in init, regular and ephemeral
// containers alike.
func NodePower(pod *corev1.Pod) []Finding {
	var out []Finding
	add := func(control, format string, args ...any) {
		out = append(out, Finding{Control: control, What: fmt.Sprintf(format, args...)})
	}
	s := &pod.Spec
	if s.HostNetwork {
		add(ControlHostNamespaces, "hostNetwork")
	}
	if s.HostPID {
		add(ControlHostNamespaces, "hostPID")
	}
	if s.HostIPC {
		add(ControlHostNamespaces, "hostIPC")
	}
	for _, v := range s.Volumes {
		switch {
		case v.HostPath != nil:
			add(ControlHostPath, "volume %q is hostPath %s", v.Name, v.HostPath.Path)
		case v.GitRepo != nil:
			add(ControlGitRepo, "volume %q is gitRepo", v.Name)
		case v.FlexVolume != nil:
			add(ControlFlexVolume, "volume %q is flexVolume (driver %s)", v.Name, v.FlexVolume.Driver)
		}
	}
	if sc := s.SecurityContext; sc != nil {
		if isTrue(hostProcess(sc.WindowsOptions)) {
			add(ControlHostProcess, "pod windowsOptions.hostProcess")
		}
		for _, sy := range sc.Sysctls {
			if !safeSysctls[sy.Name] {
				add(ControlSysctls, "sysctl %s", sy.Name)
			}
		}
		confinement(add, "pod", sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)
	}
	for _, k := range sortedKeys(pod.Annotations) {
		if v := pod.Annotations[k]; strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) &&
			v != "" && v != corev1.DeprecatedAppArmorBetaProfileRuntimeDefault && !strings.HasPrefix(v, corev1.DeprecatedAppArmorBetaProfileNamePrefix) {
			add(ControlAppArmor, "annotation %s=%q", k, v)
		}
	}
	userNS := s.HostUsers != nil && !*s.HostUsers
	for _, c := range podspec.Containers(s) {
		where := fmt.Sprintf("container %q", c.Name)
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				add(ControlHostPorts, "%s hostPort %d", where, p.HostPort)
			}
		}
		probeHosts(add, where, c)
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if isTrue(sc.Privileged) {
			add(ControlPrivileged, "%s is privileged", where)
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				if !baselineCapabilities[cp] {
					add(ControlCapabilities, "%s adds %s", where, cp)
				}
			}
		}
		// Baseline allows any /proc mount type in a user namespace (1.35+).
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount && !userNS {
			add(ControlProcMount, "%s procMount %s", where, *sc.ProcMount)
		}
		if isTrue(hostProcess(sc.WindowsOptions)) {
			add(ControlHostProcess, "%s windowsOptions.hostProcess", where)
		}
		confinement(add, where, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions)
	}
	return out
}

// confinement checks a pod's or a container's seccomp, AppArmor and SELinux
// settings.
func confinement(add func(control, format string, args ...any), where string, sp *corev1.SeccompProfile, ap *corev1.AppArmorProfile, se *corev1.SELinuxOptions) {
	if sp != nil && sp.Type != corev1.SeccompProfileTypeRuntimeDefault && sp.Type != corev1.SeccompProfileTypeLocalhost {
		add(ControlSeccomp, "%s seccompProfile %s", where, sp.Type)
	}
	if ap != nil && ap.Type != corev1.AppArmorProfileTypeRuntimeDefault && ap.Type != corev1.AppArmorProfileTypeLocalhost {
		add(ControlAppArmor, "%s appArmorProfile %s", where, ap.Type)
	}
	if se == nil {
		return
	}
	if !seLinuxTypes[se.Type] {
		add(ControlSELinux, "%s seLinuxOptions.type %s", where, se.Type)
	}
	if se.User != "" {
		add(ControlSELinux, "%s seLinuxOptions.user %s", where, se.User)
	}
	if se.Role != "" {
		add(ControlSELinux, "%s seLinuxOptions.role %s", where, se.Role)
	}
}

// probeHosts checks the host of c's probes and lifecycle handlers: the
// kubelet connects from the host's network, so a host there lets the pod
// reach what only the node reaches (baseline since 1.34).
func probeHosts(add func(control, format string, args ...any), where string, c *corev1.Container) {
	check := func(field string, h *corev1.HTTPGetAction, t *corev1.TCPSocketAction) {
		if h != nil && h.Host != "" {
			add(ControlProbeHost, "%s %s.httpGet.host %s", where, field, h.Host)
		}
		if t != nil && t.Host != "" {
			add(ControlProbeHost, "%s %s.tcpSocket.host %s", where, field, t.Host)
		}
	}
	for _, p := range []struct {
		field string
		p     *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if p.p != nil {
			check(p.field, p.p.HTTPGet, p.p.TCPSocket)
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []struct {
			field string
			h     *corev1.LifecycleHandler
		}{{"lifecycle.postStart", l.PostStart}, {"lifecycle.preStop", l.PreStop}} {
			if h.h != nil {
				check(h.field, h.h.HTTPGet, h.h.TCPSocket)
			}
		}
	}
}

func hostProcess(w *corev1.WindowsSecurityContextOptions) *bool {
	if w == nil {
		return nil
	}
	return w.HostProcess
}

func isTrue(b *bool) bool { return b != nil && *b }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
