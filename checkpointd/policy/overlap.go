package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/podspec"
)

// Overlap lists what in pod would let the parent run beside its copy, or be
// lost for good, when the API server is back. The hand-back relies on one
// gate: the parent's sandbox cannot get its network while the copy holds the
// IP (the IPAM answers CNI error 11 and the kubelet retries). Settings the
// gate does not cover are refused in every namespace, privileged ones too:
//
//   - hostNetwork: no CNI call at all, so the parent starts at once beside
//     its copy, with the same identity and, if any, the same hostPath data;
//   - host ports (hostNetwork containers' ports are host ports too): the
//     kubelet admits the parent against the ports the copy holds, rejects it
//     (phase Failed) and never retries; a bare pod is lost, a controller's
//     pod is replaced.
//
// No flag turns this off: nothing checkpointd can do makes either safe.
func Overlap(pod *corev1.Pod) []string {
	var out []string
	if pod.Spec.HostNetwork {
		out = append(out, "hostNetwork: the pod gets no IP from the IPAM, nothing holds it back while its copy runs")
	}
	for _, c := range podspec.Containers(&pod.Spec) {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				out = append(out, fmt.Sprintf("container %q hostPort %d: the kubelet rejects the pod for good while its copy holds the port", c.Name, p.HostPort))
			}
		}
	}
	return out
}
