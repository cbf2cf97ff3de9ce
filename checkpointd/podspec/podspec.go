// Package podspec holds the walks over a pod spec that checkpointd's policy
// and sanitizer share, so both see the same containers.
package podspec

import corev1 "k8s.io/api/core/v1"

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
