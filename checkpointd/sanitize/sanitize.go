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
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/podspec"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/contract"
)

// ErrUnsupported is wrapped by errors about pods that cannot run without an API server.
var ErrUnsupported = errors.New("pod cannot be restored without the API server")

// OptedIn reports whether the pod carries one of the opt-in annotations with value "true".
func OptedIn(pod *corev1.Pod) bool { return contract.OptedIn(pod.Annotations) }

// IsCopy reports whether the pod is a static or mirror pod, or a checkpoint copy:
// such pods are never parents.
func IsCopy(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[contract.AnnotationCheckpointOf]; ok {
		return true
	}
	if _, ok := pod.Annotations[contract.AnnotationConfigMirror]; ok {
		return true
	}
	if src, ok := pod.Annotations[contract.AnnotationConfigSource]; ok && src != "api" {
		return true
	}
	return false
}

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

// Ref is one secret or configMap a checkpoint of a pod needs, and which of
// its keys.
type Ref struct {
	Kind string // "Secret" or "ConfigMap"
	Name string
	// Keys lists the keys the pod uses; nil means every key (a volume
	// without items, or envFrom).
	Keys []string
	// Optional: every reference to the object is optional, so a missing
	// object is not an error.
	Optional bool
}

// Refs returns the secrets and configMaps whose data a checkpoint of pod
// needs, with the keys it uses: secrets mounted by volumes, configMaps
// mounted by volumes or read by the environment. Secrets read only by the
// environment are not returned: they are never restored (see the package
// documentation), so they are never read.
func Refs(pod *corev1.Pod) []Ref {
	type acc struct {
		all      bool
		keys     map[string]bool
		optional bool
	}
	refs := map[[2]string]*acc{}
	note := func(kind, name string, items []corev1.KeyToPath, optional *bool) {
		k := [2]string{kind, name}
		a := refs[k]
		if a == nil {
			a = &acc{keys: map[string]bool{}, optional: true}
			refs[k] = a
		}
		a.optional = a.optional && isTrue(optional)
		if items == nil {
			a.all = true
		}
		for _, it := range items {
			a.keys[it.Key] = true
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.Secret != nil:
			note("Secret", v.Secret.SecretName, nilIfEmpty(v.Secret.Items), v.Secret.Optional)
		case v.ConfigMap != nil:
			note("ConfigMap", v.ConfigMap.Name, nilIfEmpty(v.ConfigMap.Items), v.ConfigMap.Optional)
		case v.Projected != nil:
			if hasToken(v.Projected) {
				continue // dropped with its token
			}
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					note("Secret", src.Secret.Name, nilIfEmpty(src.Secret.Items), src.Secret.Optional)
				}
				if src.ConfigMap != nil {
					note("ConfigMap", src.ConfigMap.Name, nilIfEmpty(src.ConfigMap.Items), src.ConfigMap.Optional)
				}
			}
		}
	}
	kept := pod.Spec
	kept.EphemeralContainers = nil // not in the copy
	for _, ctr := range podspec.Containers(&kept) {
		for _, ef := range ctr.EnvFrom {
			if ef.ConfigMapRef != nil {
				note("ConfigMap", ef.ConfigMapRef.Name, nil, ef.ConfigMapRef.Optional)
			}
		}
		for _, e := range ctr.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				r := e.ValueFrom.ConfigMapKeyRef
				note("ConfigMap", r.Name, []corev1.KeyToPath{{Key: r.Key}}, r.Optional)
			}
		}
	}
	out := make([]Ref, 0, len(refs))
	for k, a := range refs {
		r := Ref{Kind: k[0], Name: k[1], Optional: a.optional}
		if !a.all {
			r.Keys = sortedKeys(a.keys)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Filter keeps the keys of data that r names (every key when r.Keys is nil).
func (r Ref) Filter(data map[string][]byte) map[string][]byte {
	if r.Keys == nil {
		return data
	}
	out := make(map[string][]byte, len(r.Keys))
	for _, k := range r.Keys {
		if v, ok := data[k]; ok {
			out[k] = v
		}
	}
	return out
}

func nilIfEmpty(items []corev1.KeyToPath) []corev1.KeyToPath {
	if len(items) == 0 {
		return nil
	}
	return items
}

// Check reports whether pod can be restored at all (see ErrUnsupported).
func Check(pod *corev1.Pod) error {
	if needs := policy.NeedsAPIServer(pod); len(needs) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(needs, "; "), ErrUnsupported)
	}
	return nil
}

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

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        parent.Name,
			Namespace:   parent.Namespace,
			Labels:      copyMap(parent.Labels),
			Annotations: map[string]string{},
		},
		Spec: *parent.Spec.DeepCopy(),
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

	spec := &pod.Spec
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
		if contract.IsDNSLabel(parent.Name) {
			spec.Hostname = parent.Name
		} else {
			warn("spec.hostname not set: pod name %q is not a valid host name; the copy's host name is derived from its static pod name", parent.Name)
		}
	}

	volRoot := VolumeRoot(id)
	var fsGroup *int64
	if spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil {
		g := *spec.SecurityContext.FSGroup
		fsGroup = &g
	}
	dropped := map[string]bool{}
	converted := map[string]bool{}
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		var files []File
		var err error
		switch {
		case v.Secret != nil:
			files, err = secretFiles(rec, v.Secret)
		case v.ConfigMap != nil:
			files, err = configMapFiles(rec, v.ConfigMap)
		case v.Projected != nil:
			if hasToken(v.Projected) {
				dropped[v.Name] = true
				if !strings.HasPrefix(v.Name, "kube-api-access-") {
					warn("volume %q dropped: it projects a service account token", v.Name)
				}
				continue
			}
			files, err = projectedFiles(rec, v.Projected, warn, v.Name)
		default:
			vols = append(vols, v)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		dir := path.Join(volRoot, v.Name)
		for _, fl := range files {
			fl.Path = path.Join(dir, fl.Path)
			if fsGroup != nil {
				fl.Mode |= 0o440
				fl.GID = fsGroup
			}
			res.Files = append(res.Files, fl)
		}
		hostDir := corev1.HostPathDirectory
		converted[v.Name] = true
		vols = append(vols, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(opts.VolumeDir, filepath.FromSlash(dir)), Type: &hostDir},
		}})
	}
	spec.Volumes = vols

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
				return nil, fmt.Errorf("container %q: %w", c.Name, err)
			}
			c.Env, c.EnvFrom = env, nil
		}
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	res.Pod = pod
	return res, nil
}

func hasToken(p *corev1.ProjectedVolumeSource) bool {
	for _, src := range p.Sources {
		if src.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

func defaultMode(m *int32) uint32 {
	if m == nil {
		return 0o644
	}
	return uint32(*m) & 0o777
}

// keyFiles maps data keys to files the way the kubelet does: every key when
// items is empty, else the listed keys at their paths.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, mode uint32, optional bool, what string) ([]File, error) {
	var files []File
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			files = append(files, File{Path: k, Data: data[k], Mode: mode})
		}
		return files, nil
	}
	for _, it := range items {
		d, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = uint32(*it.Mode) & 0o777
		}
		files = append(files, File{Path: it.Path, Data: d, Mode: m})
	}
	for _, fl := range files {
		if !safeRelPath(fl.Path) {
			return nil, fmt.Errorf("%s: unsafe file path %q", what, fl.Path)
		}
	}
	return files, nil
}

func safeRelPath(p string) bool {
	if p == "" || path.IsAbs(p) || strings.HasPrefix(p, "..") {
		return false
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return false
		}
	}
	return true
}

func isTrue(p *bool) bool { return p != nil && *p }

func secretFiles(rec *checkpoint.Record, s *corev1.SecretVolumeSource) ([]File, error) {
	data, ok := rec.Secrets[s.SecretName]
	if !ok {
		if isTrue(s.Optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %q was not saved with the checkpoint", s.SecretName)
	}
	return keyFiles(data, s.Items, defaultMode(s.DefaultMode), isTrue(s.Optional), "secret "+s.SecretName)
}

func configMapFiles(rec *checkpoint.Record, c *corev1.ConfigMapVolumeSource) ([]File, error) {
	data, ok := rec.ConfigMaps[c.Name]
	if !ok {
		if isTrue(c.Optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("configMap %q was not saved with the checkpoint", c.Name)
	}
	return keyFiles(data, c.Items, defaultMode(c.DefaultMode), isTrue(c.Optional), "configMap "+c.Name)
}

func projectedFiles(rec *checkpoint.Record, p *corev1.ProjectedVolumeSource, warn func(string, ...any), vol string) ([]File, error) {
	mode := defaultMode(p.DefaultMode)
	var files []File
	for _, src := range p.Sources {
		var fs []File
		var err error
		switch {
		case src.Secret != nil:
			data, ok := rec.Secrets[src.Secret.Name]
			if !ok {
				if isTrue(src.Secret.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q was not saved with the checkpoint", src.Secret.Name)
			}
			fs, err = keyFiles(data, src.Secret.Items, mode, isTrue(src.Secret.Optional), "secret "+src.Secret.Name)
		case src.ConfigMap != nil:
			data, ok := rec.ConfigMaps[src.ConfigMap.Name]
			if !ok {
				if isTrue(src.ConfigMap.Optional) {
					continue
				}
				return nil, fmt.Errorf("configMap %q was not saved with the checkpoint", src.ConfigMap.Name)
			}
			fs, err = keyFiles(data, src.ConfigMap.Items, mode, isTrue(src.ConfigMap.Optional), "configMap "+src.ConfigMap.Name)
		default:
			warn("volume %q: a projected source other than secret/configMap was dropped", vol)
		}
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	return files, nil
}

func inlineEnv(rec *checkpoint.Record, c *corev1.Container, warn func(string, ...any)) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			data, ok := rec.ConfigMaps[ef.ConfigMapRef.Name]
			if !ok {
				if isTrue(ef.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configMap %q was not saved with the checkpoint", ef.ConfigMapRef.Name)
			}
			for _, k := range sortedKeys(data) {
				name := ef.Prefix + k
				if len(validation.IsEnvVarName(name)) > 0 {
					continue // the kubelet skips invalid names too
				}
				env = append(env, corev1.EnvVar{Name: name, Value: string(data[k])})
			}
		case ef.SecretRef != nil:
			warn("container %q: envFrom secret %q dropped (secrets are never written into manifests)", c.Name, ef.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				warn("container %q: env %s from secret %q dropped (secrets are never written into manifests)", c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
				continue
			case e.ValueFrom.ConfigMapKeyRef != nil:
				ref := e.ValueFrom.ConfigMapKeyRef
				v, ok := rec.ConfigMaps[ref.Name][ref.Key]
				if !ok {
					if isTrue(ref.Optional) {
						continue
					}
					return nil, fmt.Errorf("env %s: configMap %q key %q was not saved with the checkpoint", e.Name, ref.Name, ref.Key)
				}
				e = corev1.EnvVar{Name: e.Name, Value: string(v)}
			}
		}
		env = append(env, e)
	}
	return env, nil
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
