// Package sanitize turns a saved pod into a static pod manifest that a
// kubelet runs with no API server.
//
// What changes, and why:
//
//   - Metadata: only name, namespace, labels and annotations are kept. The
//     opt-in annotations are dropped (the mirror pod must not be taken for a
//     parent), as are kubectl's last-applied configuration and the kubelet's
//     own kubernetes.io/config.* keys. Added: stickyip.io/checkpoint-of
//     (namespace/name of the parent, so the IPAM gives the copy the parent's
//     IP), stickyip.io/checkpoint-uid, and io.kubernetes.cri/reserved-ip-duration
//     (the parent's value, or Options.Reservation when the parent has none, so
//     the IP stays reserved for the parent when the copy is removed).
//   - Spec: status, nodeName, scheduling-only fields (nodeSelector, affinity,
//     schedulerName, topologySpreadConstraints, schedulingGates), overhead,
//     ephemeral containers and imagePullSecrets are removed. The service
//     account is removed and automountServiceAccountToken set to false; the
//     projected service-account token volume (kube-api-access-*) and its
//     mounts are removed. imagePullPolicy Always becomes IfNotPresent (a node
//     cut off from its API server is often cut off from its registry). When
//     spec.hostname is empty it is set to the parent's name, so the container
//     keeps the parent's host name (the kubelet names the static pod
//     <name>-<node>).
//   - Secrets and configMaps (volumes, and configMap sources of projected
//     volumes) become read-only hostPath volumes pointing at files that
//     checkpointd writes from the data saved with the checkpoint
//     (Result.Files). File modes are those the kubelet would give: the
//     item's mode, else defaultMode, else 0644; with a pod fsGroup the files
//     belong to that group and gain group read (0440), as with the kubelet.
//     Nothing is ever made more permissive than the kubelet would make it.
//   - Environment: configMapKeyRef and envFrom configMapRef are inlined as
//     plain values (configMaps are not secret). secretKeyRef and envFrom
//     secretRef are dropped and reported as warnings: inlining them would put
//     secret values into the manifest and, once the API server returns, into
//     the mirror pod that anyone allowed to read pods can see.
//   - Unsupported (Manifest fails with ErrUnsupported): persistentVolumeClaim
//     and generic ephemeral volumes, and resource claims: they need the API
//     server to be resolved.
package sanitize

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
)

// Options tune Manifest.
type Options struct {
	// VolumeDir is the host directory under which checkpointd writes the
	// restored secret and configMap files; the copy's volumes point at
	// VolumeDir/<namespace>_<name>/<volume>.
	VolumeDir string
	// Reservation is the reservation annotation value set on the copy when the
	// parent has none (or "0"); empty leaves it unset.
	Reservation string
}

// File is a file the restorer must write before the static copy starts.
type File struct {
	// Path is relative to VolumeDir.
	Path string
	Data []byte
	Mode uint32
	// GID, when set, is the group the file must belong to (the pod's fsGroup).
	GID *int64
}

// Result is a sanitized static pod with the files it needs.
type Result struct {
	Pod      *corev1.Pod
	Files    []File
	Warnings []string
}

// VolumeRoot returns the directory, relative to VolumeDir, holding the files of id.
func VolumeRoot(id checkpoint.ID) string { return id.Key() }

// Manifest returns the static pod manifest for rec.
func Manifest(rec *checkpoint.Record, opts Options) (*Result, error) {
	parent := rec.Pod
	if parent == nil {
		return nil, errors.New("record has no pod")
	}
	if err := Check(parent); err != nil {
		return nil, err
	}
	id := rec.ID()
	res := &Result{}
	warn := func(format string, args ...any) { res.Warnings = append(res.Warnings, fmt.Sprintf(format, args...)) }

	pod := copyMeta(parent, id, opts)
	pod.Spec = *parent.Spec.DeepCopy()
	standalone(&pod.Spec, parent.Name, warn)
	var dropped, converted map[string]bool
	var err error
	if res.Files, dropped, converted, err = hostVolumes(rec, &pod.Spec, id, opts, warn); err != nil {
		return nil, err
	}
	if err := fixContainers(rec, &pod.Spec, dropped, converted, warn); err != nil {
		return nil, err
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	res.Pod = pod
	return res, nil
}

// copyMeta is the copy's pod without its spec: the parent's name,
// namespace and labels; its annotations but the opt-in ones and those only
// the parent's own objects mean; the checkpoint annotations naming the
// parent; opts.Reservation when the parent reserves nothing.
func copyMeta(parent *corev1.Pod, id checkpoint.ID, opts Options) *corev1.Pod {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        parent.Name,
			Namespace:   parent.Namespace,
			Labels:      copyMap(parent.Labels),
			Annotations: map[string]string{},
		},
	}
	for k, v := range parent.Annotations {
		switch {
		case slices.Contains(contract.OptInAnnotations, k),
			k == "kubectl.kubernetes.io/last-applied-configuration",
			strings.HasPrefix(k, "kubernetes.io/config."):
			continue
		}
		pod.Annotations[k] = v
	}
	pod.Annotations[contract.AnnotationCheckpointOf] = id.String()
	if parent.UID != "" {
		pod.Annotations[contract.AnnotationCheckpointUID] = string(parent.UID)
	}
	if v := pod.Annotations[contract.AnnotationReservedDuration]; (v == "" || v == "0") && opts.Reservation != "" {
		pod.Annotations[contract.AnnotationReservedDuration] = opts.Reservation
	}
	return pod
}

// standalone drops from spec what ties the pod to the API server and the
// scheduler (node, service account and its token, scheduling, image pull
// secrets, ephemeral containers) and keeps the parent's host name when it
// can be one.
func standalone(spec *corev1.PodSpec, name string, warn func(string, ...any)) {
	spec.NodeName = ""
	spec.ServiceAccountName = ""
	spec.DeprecatedServiceAccount = ""
	f := false
	spec.AutomountServiceAccountToken = &f
	spec.NodeSelector = nil
	spec.Affinity = nil
	spec.SchedulerName = ""
	spec.TopologySpreadConstraints = nil
	spec.SchedulingGates = nil
	spec.Overhead = nil
	spec.EphemeralContainers = nil
	if len(spec.ImagePullSecrets) > 0 {
		warn("imagePullSecrets dropped: images must already be on the node")
		spec.ImagePullSecrets = nil
	}
	if spec.Hostname == "" {
		// Keep the parent's host name when it can be one (the kubelet would
		// otherwise use the copy's name, <name>-<node>); a name with a dot or
		// over 63 characters cannot, and the kubelet rejects such a manifest.
		if contract.IsDNSLabel(name) {
			spec.Hostname = name
		} else {
			warn("spec.hostname not set: pod name %q is not a valid host name; the copy's host name is derived from its static pod name", name)
		}
	}
}

// hostVolumes turns spec's Secret, ConfigMap and projected volumes into
// hostPath volumes of files under opts.VolumeDir (returned, to be written)
// and drops the projected service-account tokens. dropped and converted
// name the volumes it dropped and turned into files.
func hostVolumes(rec *checkpoint.Record, spec *corev1.PodSpec, id checkpoint.ID, opts Options,
	warn func(string, ...any)) (files []File, dropped, converted map[string]bool, err error) {
	volRoot := VolumeRoot(id)
	var fsGroup *int64
	if spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil {
		g := *spec.SecurityContext.FSGroup
		fsGroup = &g
	}
	dropped, converted = map[string]bool{}, map[string]bool{}
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		var vfiles []File
		var err error
		switch {
		case v.Secret != nil:
			vfiles, err = secretFiles(rec, v.Secret)
		case v.ConfigMap != nil:
			vfiles, err = configMapFiles(rec, v.ConfigMap)
		case v.Projected != nil:
			if hasToken(v.Projected) {
				dropped[v.Name] = true
				if !strings.HasPrefix(v.Name, "kube-api-access-") {
					warn("volume %q dropped: it projects a service account token", v.Name)
				}
				continue
			}
			vfiles, err = projectedFiles(rec, v.Projected, warn, v.Name)
		default:
			vols = append(vols, v)
			continue
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		dir := path.Join(volRoot, v.Name)
		for _, fl := range vfiles {
			fl.Path = path.Join(dir, fl.Path)
			if fsGroup != nil {
				fl.Mode |= 0o440
				fl.GID = fsGroup
			}
			files = append(files, fl)
		}
		hostDir := corev1.HostPathDirectory
		converted[v.Name] = true
		vols = append(vols, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(opts.VolumeDir, filepath.FromSlash(dir)), Type: &hostDir},
		}})
	}
	spec.Volumes = vols
	return files, dropped, converted, nil
}

// fixContainers makes spec's init and regular containers run from the
// node alone: images pulled only if absent, mounts of dropped volumes gone
// and of converted ones read-only, Secret and ConfigMap environment
// inlined.
func fixContainers(rec *checkpoint.Record, spec *corev1.PodSpec, dropped, converted map[string]bool, warn func(string, ...any)) error {
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			if c.ImagePullPolicy == corev1.PullAlways {
				c.ImagePullPolicy = corev1.PullIfNotPresent
			}
			var mounts []corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if dropped[m.Name] {
					continue
				}
				if converted[m.Name] {
					m.ReadOnly = true
				}
				mounts = append(mounts, m)
			}
			c.VolumeMounts = mounts
			env, err := inlineEnv(rec, c, warn)
			if err != nil {
				return fmt.Errorf("container %q: %w", c.Name, err)
			}
			c.Env, c.EnvFrom = env, nil
		}
	}
	return nil
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
