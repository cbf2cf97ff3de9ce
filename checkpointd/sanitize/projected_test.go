package sanitize

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

// withBundle adds to rec's pod a projected volume "bundle" of secret and
// configMap sources (no token), two of them optional and absent, and a
// downward API source, mounted at /bundle.
func withBundle(rec *checkpoint.Record) {
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	p := rec.Pod
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "bundle", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o440)),
		Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref("db-tls"), Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "certs/tls.crt"}}}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("db-config"), Items: []corev1.KeyToPath{{Key: "mode", Path: "mode"}}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref("absent"), Optional: ptr(true)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("absent-cm"), Optional: ptr(true)}},
			{DownwardAPI: &corev1.DownwardAPIProjection{}},
		},
	}}})
	p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "bundle", MountPath: "/bundle"})
}

// TestProjectedVolume: a projected volume without a token becomes a
// directory of files, each source's keys at their paths under the
// projection's mode; an absent optional source is left out, the downward
// API source dropped with a warning naming the volume, and an absent
// required source fails the copy naming it.
func TestProjectedVolume(t *testing.T) {
	rec := apiRecord()
	rec.Pod.Spec.SecurityContext = nil // modes as given
	withBundle(rec)
	res, err := Manifest(rec, Options{VolumeDir: "/v"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range res.Files {
		if strings.HasPrefix(f.Path, "prod_db-0/bundle/") {
			got[f.Path] = fmt.Sprintf("%s %o", f.Data, f.Mode)
		}
	}
	want := map[string]string{"prod_db-0/bundle/certs/tls.crt": "CRT 440", "prod_db-0/bundle/mode": "replica 440"}
	if len(got) != len(want) || got["prod_db-0/bundle/certs/tls.crt"] != want["prod_db-0/bundle/certs/tls.crt"] || got["prod_db-0/bundle/mode"] != want["prod_db-0/bundle/mode"] {
		t.Errorf("the projected volume's files %v, want %v", got, want)
	}
	var bundle *corev1.Volume
	for i, v := range res.Pod.Spec.Volumes {
		if v.Name == "bundle" {
			bundle = &res.Pod.Spec.Volumes[i]
		}
	}
	if bundle == nil || bundle.HostPath == nil || bundle.HostPath.Path != "/v/prod_db-0/bundle" {
		t.Errorf("the projected volume in the copy: %+v, want hostPath /v/prod_db-0/bundle", bundle)
	}
	if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, `volume "bundle": a projected source other than secret/configMap was dropped`) {
		t.Errorf("warnings %q do not name the dropped downward API source", w)
	}
	if err := Validate(res.Pod, "node1"); err != nil {
		t.Errorf("the copy fails validation: %v", err)
	}

	for _, required := range []int{2, 3} {
		rec := apiRecord()
		withBundle(rec)
		src := rec.Pod.Spec.Volumes[len(rec.Pod.Spec.Volumes)-1].Projected.Sources[required]
		name := "absent"
		if src.Secret != nil {
			src.Secret.Optional = nil
		} else {
			src.ConfigMap.Optional, name = nil, "absent-cm"
		}
		if _, err := Manifest(rec, Options{VolumeDir: "/v"}); err == nil || !strings.Contains(err.Error(), `"`+name+`" was not saved`) {
			t.Errorf("a required projected source missing: %v, want an error naming %s", err, name)
		}
	}
}

// TestRefsProjected: the objects a projected volume reads are listed with
// their keys, optional when every reference is, merged with the pod's
// other references, in a stable order (kind, then name).
func TestRefsProjected(t *testing.T) {
	rec := apiRecord()
	withBundle(rec)
	var got []string
	for _, r := range Refs(rec.Pod) {
		s := r.Kind + "/" + r.Name + " keys=" + strings.Join(r.Keys, ",")
		if r.Keys == nil {
			s = r.Kind + "/" + r.Name + " all"
		}
		if r.Optional {
			s += " optional"
		}
		got = append(got, s)
	}
	want := []string{
		"ConfigMap/absent-cm all optional",
		"ConfigMap/db-config all", // also mounted whole
		"ConfigMap/db-env all",
		"Secret/absent all optional",
		"Secret/db-tls keys=tls.crt,tls.key",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Refs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
