//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestCheckpointdPolicy is the node operator's policy on real components:
// an API server with Node,RBAC authorization, the kubelet, checkpointd with
// the node's identity allowing kube-system (no namespace allowed privileged
// pods). One opted-in pod per Pod Security Standards baseline control the
// API server and this node's kubelet accept (Linux, no AppArmor), plus
// gitRepo and flexVolume; each is refused with a CheckpointRefused Event
// naming the control, and none gets a checkpoint. hostNetwork and host-port
// pods are refused as parent-and-copy-overlap. A pod using only what
// baseline allows is saved, so the refusals are the policy's, not a
// checkpointd that saves nothing. (HostProcess and an unmasked /proc
// cannot reach a Linux kubelet outside a user namespace: the API server
// refuses them; unsafe sysctls are rejected by the kubelet before
// checkpointd sees the pod running: unit tests cover those.)
func TestCheckpointdPolicy(t *testing.T) {
	n := runningCheckpointdNode(t)
	ctx := context.Background()

	optIn := map[string]string{annCheckpoint: "true"}
	yes := true
	sc := func(s corev1.SecurityContext) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = &s }
	}
	volume := func(src corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: src}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}
		}
	}
	// name -> the spec change, and what the refusal Event must say.
	cases := map[string]struct {
		mut  func(*corev1.Pod)
		want string
	}{
		"hostpid":    {func(p *corev1.Pod) { p.Spec.HostPID = true }, "node-level power (hostNamespaces: hostPID)"},
		"hostipc":    {func(p *corev1.Pod) { p.Spec.HostIPC = true }, "node-level power (hostNamespaces: hostIPC)"},
		"privileged": {sc(corev1.SecurityContext{Privileged: &yes}), `node-level power (privileged: container "main" is privileged)`},
		"init-privileged": {func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: p.Spec.Containers[0].Image, Command: []string{"/pause"}, Args: []string{"-exit"},
				ImagePullPolicy: corev1.PullNever, SecurityContext: &corev1.SecurityContext{Privileged: &yes}}}
		}, `node-level power (privileged: container "init" is privileged)`},
		"capabilities": {sc(corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}),
			`node-level power (capabilities: container "main" adds NET_ADMIN)`},
		"hostpath": {volume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}), `node-level power (hostPathVolumes: volume "v" is hostPath /tmp)`},
		"apparmor": {sc(corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}),
			`node-level power (appArmorProfile: container "main" appArmorProfile Unconfined)`},
		"selinux": {sc(corev1.SecurityContext{SELinuxOptions: &corev1.SELinuxOptions{Type: "spc_t"}}),
			`node-level power (seLinuxOptions: container "main" seLinuxOptions.type spc_t)`},
		"seccomp": {func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, "node-level power (seccompProfile: pod seccompProfile Unconfined)"},
		"probe-host": {func(p *corev1.Pod) {
			p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "169.254.169.254", Port: intstr.FromInt32(80)}}}
		}, `node-level power (hostProbesAndHostLifecycle: container "main" readinessProbe.httpGet.host 169.254.169.254)`},
		"prestop-host": {func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(2379)}}}
		}, `node-level power (hostProbesAndHostLifecycle: container "main" lifecycle.preStop.tcpSocket.host 127.0.0.1)`},
		"gitrepo":    {volume(corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.invalid/r.git"}}), `node-level power (gitRepoVolumes: volume "v" is gitRepo)`},
		"flexvolume": {volume(corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/none"}}), `node-level power (flexVolumeVolumes: volume "v" is flexVolume`},
		"hostport": {func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 18080}}
		},
			`could run at the same time when the API server is back (container "main" hostPort 18080`},
		"hostnetwork": {func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "could run at the same time when the API server is back (hostNetwork"},
	}
	names := make([]string, 0, len(cases))
	for name, c := range cases {
		p := podSpec("kube-system", "psa-"+name, optIn)
		c.mut(p)
		n.createPod(p)
		names = append(names, name)
	}
	sort.Strings(names)
	// Only what baseline allows: saved.
	ok := podSpec("kube-system", "psa-allowed", optIn)
	ok.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
	ok.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
	ok.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	n.createPod(ok)
	n.waitPodRunningIn("kube-system", "psa-allowed", 3*time.Minute)
	eventually(t, "psa-allowed saved", time.Minute, time.Second, func() (bool, string) {
		_, err := os.Stat(n.checkpointFile("kube-system", "psa-allowed"))
		return err == nil, fmt.Sprint(err)
	})

	start := time.Now()
	eventually(t, "a CheckpointRefused Event per violation", 2*time.Minute, time.Second, func() (bool, string) {
		for _, name := range names {
			want := "CheckpointRefused: checkpointd on node node1 will not checkpoint this pod: "
			ev := strings.Join(n.eventTexts(ctx, "kube-system", "psa-"+name), "\n")
			if !strings.Contains(ev, want) || !strings.Contains(ev, cases[name].want) {
				return false, fmt.Sprintf("psa-%s events %q lack %q", name, ev, cases[name].want)
			}
		}
		return true, ""
	})
	t.Logf("%d refusal Events within %s of the last save", len(names), time.Since(start).Round(time.Second))
	for _, name := range names {
		if _, err := os.Stat(n.checkpointFile("kube-system", "psa-"+name)); !os.IsNotExist(err) {
			t.Errorf("psa-%s has a checkpoint (stat: %v); it must not", name, err)
		}
	}
	for m, want := range map[string]string{
		`checkpointd_refusals_total{reason="privileged"}`:              fmt.Sprint(len(names) - 2),
		`checkpointd_refusals_total{reason="parent-and-copy-overlap"}`: "2",
	} {
		if v, err := n.metric(m); err != nil || v != want {
			t.Errorf("%s = %q, %v; want %s", m, v, err, want)
		}
	}
}
