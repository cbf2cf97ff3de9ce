package sanitize

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// maxAnnotationsSize is the API's limit on the total size of a pod's
// annotations (keys and values), which the kubelet applies to static pods.
const maxAnnotationsSize = 256 * 1024

// ErrInvalid is wrapped by Validate's errors: the kubelet would reject the
// manifest, so it must not be written.
var ErrInvalid = errors.New("the kubelet would reject this static pod")

// Validate checks a copy the way the kubelet checks a static pod file before
// it runs it (it names the pod <name>-<node> and validates it as a pod
// creation): names, host name, labels and annotations, containers, ports,
// volumes and mounts, environment variable names. It covers what a copy of a
// pod the API server accepted can still get wrong — the longer name, the
// host name checkpointd derives, the converted volumes — not every rule of
// the API server.
func Validate(pod *corev1.Pod, node string) error {
	errs := validateMeta(pod, node)
	spec := field.NewPath("spec")
	if h := pod.Spec.Hostname; h != "" {
		for _, msg := range validation.IsDNS1123Label(h) {
			errs = append(errs, field.Invalid(spec.Child("hostname"), h, msg))
		}
	}
	if d := pod.Spec.Subdomain; d != "" {
		for _, msg := range validation.IsDNS1123Label(d) {
			errs = append(errs, field.Invalid(spec.Child("subdomain"), d, msg))
		}
	}
	switch pod.Spec.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(spec.Child("restartPolicy"), pod.Spec.RestartPolicy, []string{"Always", "OnFailure", "Never"}))
	}
	volumes := map[string]bool{}
	for i, v := range pod.Spec.Volumes {
		p := spec.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(v.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), v.Name, msg))
		}
		if volumes[v.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		volumes[v.Name] = true
		if v.HostPath != nil && v.HostPath.Path == "" {
			errs = append(errs, field.Required(p.Child("hostPath", "path"), ""))
		}
	}
	names := map[string]bool{}
	for i := range pod.Spec.InitContainers {
		errs = append(errs, validateContainer(&pod.Spec.InitContainers[i], spec.Child("initContainers").Index(i), volumes, names)...)
	}
	for i := range pod.Spec.Containers {
		errs = append(errs, validateContainer(&pod.Spec.Containers[i], spec.Child("containers").Index(i), volumes, names)...)
	}
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("containers"), ""))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %v", ErrInvalid, errs.ToAggregate())
	}
	return nil
}

// validateMeta checks the copy's metadata: its static name <name>-<node>,
// namespace, labels and annotations.
func validateMeta(pod *corev1.Pod, node string) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	staticName := pod.Name + "-" + strings.ToLower(node)
	for _, msg := range validation.IsDNS1123Subdomain(staticName) {
		errs = append(errs, field.Invalid(meta.Child("name"), staticName, "static pod name <name>-<node>: "+msg))
	}
	for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
	}
	errs = append(errs, metav1validation.ValidateLabels(pod.Labels, meta.Child("labels"))...)
	size := 0
	for k, v := range pod.Annotations {
		size += len(k) + len(v)
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(meta.Child("annotations"), k, msg))
		}
	}
	if size > maxAnnotationsSize {
		errs = append(errs, field.TooLong(meta.Child("annotations"), "", maxAnnotationsSize))
	}
	return errs
}

// validateContainer checks one container at p: its name (unique among the
// pod's, names), image, mounts (of volumes the pod has), environment
// variable names and ports.
func validateContainer(c *corev1.Container, p *field.Path, volumes, names map[string]bool) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
	}
	if names[c.Name] {
		errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
	}
	names[c.Name] = true
	if c.Image == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	}
	paths := map[string]bool{}
	for j, m := range c.VolumeMounts {
		mp := p.Child("volumeMounts").Index(j)
		if !volumes[m.Name] {
			errs = append(errs, field.NotFound(mp.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		}
		if paths[m.MountPath] {
			errs = append(errs, field.Duplicate(mp.Child("mountPath"), m.MountPath))
		}
		paths[m.MountPath] = true
	}
	for j, e := range c.Env {
		for _, msg := range validation.IsEnvVarName(e.Name) {
			errs = append(errs, field.Invalid(p.Child("env").Index(j).Child("name"), e.Name, msg))
		}
	}
	for j, port := range c.Ports {
		pp := p.Child("ports").Index(j)
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
		}
	}
	return errs
}
