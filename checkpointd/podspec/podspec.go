// Package podspec holds the walks over a pod spec that checkpointd's policy
// and sanitizer share, so both see the same containers and refuse the same
// pods.
package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Containers returns every container of spec: init, regular and ephemeral
// containers, in that order, as the kubelet and the Pod Security admission
// visit them. The pointers point into spec.
func Containers(spec *corev1.PodSpec) []*corev1.Container {
	out := make([]*corev1.Container, 0, len(spec.InitContainers)+len(spec.Containers)+len(spec.EphemeralContainers))
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		out = append(out, (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
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
