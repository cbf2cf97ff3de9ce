package policy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

type mutation func(*corev1.Pod)

func secCtx(p *corev1.Pod) *corev1.SecurityContext {
	if p.Spec.Containers[0].SecurityContext == nil {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{}
	}
	return p.Spec.Containers[0].SecurityContext
}

func podSecCtx(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

func volume(src corev1.VolumeSource) mutation {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v", VolumeSource: src})
	}
}

func probe(set func(c *corev1.Container)) mutation {
	return func(p *corev1.Pod) { set(&p.Spec.Containers[0]) }
}

// baselineControls is the Pod Security Standards baseline profile
// (kubernetes.io/docs/concepts/security/pod-security-standards, Kubernetes
// 1.36), control by control: each refused value, and each value the profile
// allows (so a check broader than baseline fails here too).
var baselineControls = []struct {
	control string
	refused map[string]mutation
	allowed map[string]mutation
}{
	{ControlHostProcess, map[string]mutation{
		"pod": func(p *corev1.Pod) {
			podSecCtx(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}
		},
		"container": func(p *corev1.Pod) {
			secCtx(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}
		},
	}, map[string]mutation{
		"false": func(p *corev1.Pod) {
			secCtx(p).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(false)}
		},
	}},
	{ControlHostNamespaces, map[string]mutation{
		"hostPID": func(p *corev1.Pod) { p.Spec.HostPID = true },
		"hostIPC": func(p *corev1.Pod) { p.Spec.HostIPC = true },
		// hostNetwork: refused as an overlap, see TestOverlapRefusedEverywhere.
	}, map[string]mutation{
		"false": func(p *corev1.Pod) { p.Spec.HostPID, p.Spec.HostIPC, p.Spec.HostNetwork = false, false, false },
	}},
	{ControlPrivileged, map[string]mutation{
		"true": func(p *corev1.Pod) { secCtx(p).Privileged = ptr(true) },
	}, map[string]mutation{
		"false": func(p *corev1.Pod) { secCtx(p).Privileged = ptr(false) },
	}},
	{ControlCapabilities, map[string]mutation{
		"NET_ADMIN": func(p *corev1.Pod) {
			secCtx(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}
		},
		"SYS_ADMIN": func(p *corev1.Pod) {
			secCtx(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "SYS_ADMIN"}}
		},
		"NET_RAW": func(p *corev1.Pod) {
			secCtx(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}
		},
		"ALL": func(p *corev1.Pod) { secCtx(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"ALL"}} },
	}, map[string]mutation{
		"the default set": func(p *corev1.Pod) {
			secCtx(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER",
				"FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}, Drop: []corev1.Capability{"ALL"}}
		},
	}},
	{ControlHostPath, map[string]mutation{
		"hostPath": volume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}),
	}, map[string]mutation{
		"emptyDir": volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
	}},
	// hostPorts: refused as an overlap, see TestOverlapRefusedEverywhere.
	{ControlAppArmor, map[string]mutation{
		"pod Unconfined": func(p *corev1.Pod) {
			podSecCtx(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		},
		"container Unconfined": func(p *corev1.Pod) {
			secCtx(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		},
		"annotation unconfined": func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}
		},
		"annotation other": func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "docker-default"}
		},
	}, map[string]mutation{
		"RuntimeDefault": func(p *corev1.Pod) {
			podSecCtx(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		},
		"Localhost": func(p *corev1.Pod) {
			secCtx(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("k8s-x")}
		},
		"annotations": func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/c": "runtime/default",
				"container.apparmor.security.beta.kubernetes.io/d": "localhost/k8s-x", "container.apparmor.security.beta.kubernetes.io/e": ""}
		},
	}},
	{ControlSELinux, map[string]mutation{
		"pod type spc_t": func(p *corev1.Pod) { podSecCtx(p).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} },
		"container type": func(p *corev1.Pod) { secCtx(p).SELinuxOptions = &corev1.SELinuxOptions{Type: "unconfined_t"} },
		"user":           func(p *corev1.Pod) { secCtx(p).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} },
		"role":           func(p *corev1.Pod) { podSecCtx(p).SELinuxOptions = &corev1.SELinuxOptions{Role: "system_r"} },
	}, map[string]mutation{
		"allowed types and level": func(p *corev1.Pod) {
			podSecCtx(p).SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"}
			p.Spec.InitContainers = []corev1.Container{
				{Name: "a", SecurityContext: &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "container_init_t"}}},
				{Name: "b", SecurityContext: &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "container_kvm_t"}}},
				{Name: "c", SecurityContext: &corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "container_engine_t"}}},
			}
		},
	}},
	{ControlProcMount, map[string]mutation{
		"Unmasked": func(p *corev1.Pod) { m := corev1.UnmaskedProcMount; secCtx(p).ProcMount = &m },
	}, map[string]mutation{
		"Default": func(p *corev1.Pod) { m := corev1.DefaultProcMount; secCtx(p).ProcMount = &m },
		"Unmasked in a user namespace": func(p *corev1.Pod) {
			m := corev1.UnmaskedProcMount
			secCtx(p).ProcMount = &m
			p.Spec.HostUsers = ptr(false)
		},
	}},
	{ControlSeccomp, map[string]mutation{
		"pod Unconfined": func(p *corev1.Pod) {
			podSecCtx(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
		"container Unconfined": func(p *corev1.Pod) {
			secCtx(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
	}, map[string]mutation{
		"RuntimeDefault": func(p *corev1.Pod) {
			podSecCtx(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		},
		"Localhost": func(p *corev1.Pod) {
			secCtx(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr("x.json")}
		},
	}},
	{ControlSysctls, map[string]mutation{
		"kernel.panic": func(p *corev1.Pod) { podSecCtx(p).Sysctls = []corev1.Sysctl{{Name: "kernel.panic", Value: "1"}} },
		"net.core.somaxconn": func(p *corev1.Pod) {
			podSecCtx(p).Sysctls = []corev1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}}
		},
	}, map[string]mutation{
		"the safe set": func(p *corev1.Pod) {
			for _, n := range []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
				"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
				"net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"} {
				podSecCtx(p).Sysctls = append(podSecCtx(p).Sysctls, corev1.Sysctl{Name: n, Value: "1"})
			}
		},
	}},
	{ControlProbeHost, map[string]mutation{
		"livenessProbe httpGet": probe(func(c *corev1.Container) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254"}}}
		}),
		"readinessProbe tcpSocket": probe(func(c *corev1.Container) {
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1"}}}
		}),
		"startupProbe httpGet": probe(func(c *corev1.Container) {
			c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1"}}}
		}),
		"postStart httpGet": probe(func(c *corev1.Container) {
			c.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1"}}}
		}),
		"preStop tcpSocket": probe(func(c *corev1.Container) {
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1"}}}
		}),
	}, map[string]mutation{
		"no host": probe(func(c *corev1.Container) {
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}}
			c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}}
			c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/stop"}}}
		}),
	}},
	{ControlGitRepo, map[string]mutation{
		"gitRepo": volume(corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/r.git"}}),
	}, nil},
	{ControlFlexVolume, map[string]mutation{
		"flexVolume": volume(corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/lvm"}}),
	}, nil},
}

// Each baseline control is refused outside --allow-privileged-namespaces,
// named in the refusal, allowed inside it; the values baseline allows are
// allowed everywhere.
func TestBaselineControls(t *testing.T) {
	strict, _ := Parse("infra", "")
	loose, _ := Parse("infra", "infra")
	for _, c := range baselineControls {
		for name, mut := range c.refused {
			t.Run(c.control+"/refused/"+name, func(t *testing.T) {
				pod := basePod("infra")
				mut(pod)
				v := strict.Evaluate(pod)
				if v.Allowed || v.Reason != ReasonPrivileged || !strings.Contains(v.Detail, c.control+":") {
					t.Errorf("verdict %+v, want refused as %s naming %s", v, ReasonPrivileged, c.control)
				}
				if v := loose.Evaluate(pod); !v.Allowed {
					t.Errorf("in a namespace allowed privileged pods: %+v, want allowed", v)
				}
			})
		}
		for name, mut := range c.allowed {
			t.Run(c.control+"/allowed/"+name, func(t *testing.T) {
				pod := basePod("infra")
				mut(pod)
				if v := strict.Evaluate(pod); !v.Allowed {
					t.Errorf("a value baseline allows was refused: %+v", v)
				}
			})
		}
	}
}

// Container-level controls hold for init and ephemeral containers too.
func TestBaselineEveryContainerKind(t *testing.T) {
	strict, _ := Parse("infra", "")
	bad := corev1.Container{Name: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1"}}}}
	for kind, mut := range map[string]mutation{
		"init": func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{bad} },
		"ephemeral": func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(bad)}}
		},
	} {
		pod := basePod("infra")
		mut(pod)
		v := strict.Evaluate(pod)
		if v.Allowed || !strings.Contains(v.Detail, ControlPrivileged+`: container "x"`) || !strings.Contains(v.Detail, ControlProbeHost+`: container "x"`) {
			t.Errorf("%s container: %+v, want refused naming both controls", kind, v)
		}
	}
}

// A parent that could run beside its copy (no CNI gate) or be rejected for
// good by the kubelet while the copy holds its host port is refused in every
// namespace, those allowed privileged pods too.
func TestOverlapRefusedEverywhere(t *testing.T) {
	loose, _ := Parse("*", "*")
	for name, mut := range map[string]mutation{
		"hostNetwork": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"hostPort": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		},
		"init hostPort": func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Ports: []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}}}
		},
		"hostPort, no others": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, HostPort: 53}}
		},
	} {
		pod := basePod("kube-system")
		mut(pod)
		if v := loose.Evaluate(pod); v.Allowed || v.Reason != ReasonOverlap {
			t.Errorf("%s: %+v, want refused as %s", name, v, ReasonOverlap)
		}
	}
	pod := basePod("kube-system")
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 0}}
	if v := loose.Evaluate(pod); !v.Allowed {
		t.Errorf("a container port without hostPort refused: %+v", v)
	}
}

// NodePower names hostNetwork and host ports as the baseline controls they
// are, although Evaluate refuses them first as an overlap.
func TestNodePowerNamesOverlapControls(t *testing.T) {
	pod := basePod("infra")
	pod.Spec.HostNetwork = true
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
	got := joinFindings(NodePower(pod))
	if got != `hostNamespaces: hostNetwork; hostPorts: container "c" hostPort 80` {
		t.Errorf("NodePower = %q", got)
	}
}
