package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
)

// save writes the checkpoint of a running, allowed parent when it is new,
// its spec changed, or its secrets and configMaps are due for a re-read.
// Only the objects and keys the pod uses are read and stored.
func (r *Reconciler) save(ctx context.Context, s *snapshot, id checkpoint.ID) {
	parent := s.parents[id]
	old := s.records[id]
	m := r.mem(id)
	fresh := !m.captured.IsZero() && s.now.Sub(m.captured) < r.cfg.Refresh && old != nil && slices.Equal(old.IPs, podIPs(parent))
	if fresh && parent.ResourceVersion != "" && parent.ResourceVersion == m.capturedRV {
		return // the object as saved (what a pass sees of nearly every pod)
	}
	pod := stripPod(parent)
	if fresh && samePod(old.Pod, pod) {
		m.capturedRV = parent.ResourceVersion
		return
	}
	if err := id.CheckLen(); err != nil {
		r.problem(id, "save", "pod will not be checkpointed", err)
		r.eventOnce(s, id, "save-failed", parent, corev1.EventTypeWarning, EventFailed,
			"checkpointd on node %s cannot checkpoint this pod: %v", r.cfg.Node, err)
		return
	}
	rec := &checkpoint.Record{Pod: pod, IPs: podIPs(parent)}
	if err := r.capture(ctx, s, rec); err != nil {
		r.problem(id, "save", "cannot read what the pod's checkpoint needs", err)
		return
	}
	if r.cfg.SkipVolumes {
		dropVolumeData(rec.Pod)
	}
	// A checkpoint that could not become a copy the kubelet runs is refused
	// now, while its owner can read an Event about it.
	res, err := sanitize.Manifest(rec, r.manifestOptions())
	if err == nil {
		err = sanitize.Validate(res.Pod, r.cfg.Node)
	}
	if err != nil {
		r.problem(id, "save", "pod will not be checkpointed", err)
		r.eventOnce(s, id, "save-failed", parent, corev1.EventTypeWarning, EventFailed,
			"checkpointd on node %s cannot checkpoint this pod: %v", r.cfg.Node, err)
		return
	}
	if len(res.Warnings) > 0 {
		r.note(id, "save-warnings", "checkpoint saved with changes", strings.Join(res.Warnings, "; "))
	}
	written, err := r.cfg.Store.Save(rec)
	if err != nil {
		r.problem(id, "save", "cannot write the checkpoint", err)
		return
	}
	r.solved(id, "save")
	m.captured, m.capturedRV = s.now, parent.ResourceVersion
	s.records[id] = rec
	if written {
		r.cfg.Metrics.SavesTotal.Inc()
		r.cfg.Log.Info("checkpoint saved", "pod", id.String(), "uid", string(pod.UID), "file", r.cfg.Store.Path(id))
		r.event(s, parent, corev1.EventTypeNormal, EventSaved,
			"checkpointd on node %s saved this pod; if the node restarts while the API server is away it runs it as a static pod with the same IP", r.cfg.Node)
	}
}

// eventOnce posts an Event once per pod UID and message.
func (r *Reconciler) eventOnce(s *snapshot, id checkpoint.ID, topic string, pod *corev1.Pod, eventType, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	seen := r.mem(id).reported
	if seen["event-"+topic] == string(pod.UID)+msg {
		return
	}
	seen["event-"+topic] = string(pod.UID) + msg
	r.event(s, pod, eventType, reason, "%s", msg)
}

// capture reads the secrets and configMaps the pod uses, keeping only the
// keys it uses.
func (r *Reconciler) capture(ctx context.Context, s *snapshot, rec *checkpoint.Record) error {
	if r.cfg.SkipVolumes {
		return nil
	}
	pod := rec.Pod
	for _, ref := range sanitize.Refs(pod) {
		data, err := s.object(ctx, r.cfg.API, ref.Kind, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && ref.Optional {
				continue
			}
			return fmt.Errorf("read %s %s/%s: %w", ref.Kind, pod.Namespace, ref.Name, err)
		}
		dst := &rec.Secrets
		if ref.Kind == "ConfigMap" {
			dst = &rec.ConfigMaps
		}
		if *dst == nil {
			*dst = map[string]map[string][]byte{}
		}
		(*dst)[ref.Name] = ref.Filter(data)
	}
	return nil
}

// stripPod keeps what a checkpoint needs: identity, labels, annotations,
// owners (the partition rule, state.ReplacementOf, reads them), spec.
func stripPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			Labels: p.Labels, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences,
		},
		Spec: *p.Spec.DeepCopy(),
	}
}

// podIPs returns the pod's addresses as its status lists them.
func podIPs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		out = append(out, p.Status.PodIP)
	}
	return out
}

func samePod(a, b *corev1.Pod) bool {
	aj, err1 := json.Marshal(a)
	bj, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(aj, bj)
}

// dropVolumeData turns secret and configMap volumes into emptyDirs (for
// --volumes=drop, where checkpointd reads no secret or configMap).
func dropVolumeData(p *corev1.Pod) {
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		if v.Secret != nil || v.ConfigMap != nil || (v.Projected != nil && !projectsToken(v.Projected)) {
			v.VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			c := &list[i]
			var env []corev1.EnvVar
			for _, e := range c.Env {
				if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil) {
					continue
				}
				env = append(env, e)
			}
			c.Env, c.EnvFrom = env, nil
		}
	}
}

func projectsToken(p *corev1.ProjectedVolumeSource) bool {
	for _, s := range p.Sources {
		if s.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

func (r *Reconciler) manifestOptions() sanitize.Options {
	return sanitize.Options{VolumeDir: r.cfg.VolumeDir, Reservation: r.cfg.Reservation}
}

// objectRead is a Secret's or ConfigMap's data as a pass read it.
type objectRead struct {
	data map[string][]byte
	err  error
}

// object returns the data of a Secret or ConfigMap, read from the API
// server once per pass: the pods of a Deployment or StatefulSet mount the
// same ones, and are saved (and refreshed) in the same pass.
func (s *snapshot) object(ctx context.Context, api API, kind, namespace, name string) (map[string][]byte, error) {
	key := kind + "/" + namespace + "/" + name
	if o, ok := s.objects[key]; ok {
		return o.data, o.err
	}
	data, err := api.Object(ctx, kind, namespace, name)
	if s.objects == nil {
		s.objects = map[string]objectRead{}
	}
	s.objects[key] = objectRead{data: data, err: err}
	return data, err
}
