package sanitize

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
)

func ptr[T any](v T) *T { return &v }

// apiPod is a pod as the API server returns it for a StatefulSet member on node1.
func apiPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "db-0", Namespace: "prod", UID: "1111-2222",
			Labels: map[string]string{"app": "db"},
			Annotations: map[string]string{
				contract.AnnotationCheckpoint:                      "true",
				contract.AnnotationReservedDuration:                "30",
				"kubectl.kubernetes.io/last-applied-configuration": "{}",
				"kubernetes.io/config.seen":                        "2026-01-01",
				"example.com/keep":                                 "yes",
			},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", UID: "ss"}},
			ResourceVersion: "42",
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		Spec: corev1.PodSpec{
			NodeName:                 "node1",
			ServiceAccountName:       "db",
			DeprecatedServiceAccount: "db",
			NodeSelector:             map[string]string{"disk": "ssd"},
			Affinity:                 &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
			SchedulerName:            "default-scheduler",
			ImagePullSecrets:         []corev1.LocalObjectReference{{Name: "regcred"}},
			Subdomain:                "db",
			Overhead:                 corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			SecurityContext:          &corev1.PodSecurityContext{FSGroup: ptr(int64(2000))},
			InitContainers: []corev1.Container{{
				Name: "init", Image: "busybox", ImagePullPolicy: corev1.PullAlways,
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
			}},
			Containers: []corev1.Container{{
				Name: "db", Image: "postgres:16", ImagePullPolicy: corev1.PullAlways,
				EnvFrom: []corev1.EnvFromSource{
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db-env"}}, Prefix: "DB_"},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db-secret-env"}}},
				},
				Env: []corev1.EnvVar{
					{Name: "PLAIN", Value: "1"},
					{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-config"}, Key: "mode"}}},
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-secret"}, Key: "password"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: "/var/lib/postgresql"},
					{Name: "tls", MountPath: "/tls"},
					{Name: "config", MountPath: "/etc/db", ReadOnly: false},
					{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/db"}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName:  "db-tls",
					DefaultMode: ptr(int32(0o400)),
					Items:       []corev1.KeyToPath{{Key: "tls.key", Path: "private/tls.key"}, {Key: "tls.crt", Path: "tls.crt", Mode: ptr(int32(0o444))}},
				}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db-config"},
				}}},
				{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
				}}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5"},
	}
}

func apiRecord() *checkpoint.Record {
	return &checkpoint.Record{
		Pod: apiPod(),
		Secrets: map[string]map[string][]byte{
			"db-tls": {"tls.key": []byte("KEY"), "tls.crt": []byte("CRT"), "unused": []byte("x")},
		},
		ConfigMaps: map[string]map[string][]byte{
			"db-config": {"mode": []byte("replica"), "db.conf": []byte("port=5432")},
			"db-env":    {"HOST": []byte("h"), "bad-name!": []byte("skipped")},
		},
	}
}

// staticPodProblems lists what would stop a kubelet with no API server from
// running pod as a static pod, or the API server's NodeRestriction admission
// from accepting its mirror pod once the API server is back.
func staticPodProblems(pod *corev1.Pod) []string {
	var p []string
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		p = append(p, "not a v1 Pod")
	}
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		p = append(p, "bad name: "+strings.Join(errs, ","))
	}
	if pod.Namespace == "" {
		p = append(p, "no namespace")
	}
	if pod.Spec.NodeName != "" {
		p = append(p, "nodeName set (conflicts with the kubelet's own)")
	}
	if pod.Spec.ServiceAccountName != "" || pod.Spec.DeprecatedServiceAccount != "" {
		p = append(p, "service account referenced")
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		p = append(p, "service account token automount not disabled")
	}
	if len(pod.Spec.ImagePullSecrets) > 0 {
		p = append(p, "imagePullSecrets reference secrets")
	}
	if pod.UID != "" || pod.ResourceVersion != "" || len(pod.OwnerReferences) > 0 || len(pod.ManagedFields) > 0 {
		p = append(p, "server-side metadata left")
	}
	if pod.Status.Phase != "" || pod.Status.PodIP != "" {
		p = append(p, "status left")
	}
	vols := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = true
		switch {
		case v.Secret != nil, v.ConfigMap != nil, v.PersistentVolumeClaim != nil, v.Ephemeral != nil:
			p = append(p, fmt.Sprintf("volume %s references an API object", v.Name))
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.Secret != nil || s.ConfigMap != nil || s.ServiceAccountToken != nil || s.ClusterTrustBundle != nil {
					p = append(p, fmt.Sprintf("projected volume %s references an API object", v.Name))
				}
			}
		}
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				p = append(p, fmt.Sprintf("container %s mounts missing volume %s", c.Name, m.Name))
			}
		}
		if len(c.EnvFrom) > 0 {
			p = append(p, fmt.Sprintf("container %s uses envFrom", c.Name))
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && (e.ValueFrom.SecretKeyRef != nil || e.ValueFrom.ConfigMapKeyRef != nil) {
				p = append(p, fmt.Sprintf("container %s env %s references an API object", c.Name, e.Name))
			}
		}
	}
	return p
}

func TestManifestIsAStaticPod(t *testing.T) {
	res, err := Manifest(apiRecord(), Options{VolumeDir: "/run/stickyip/checkpointd", Reservation: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := Marshal(res.Pod)
	if err != nil {
		t.Fatal(err)
	}
	// What the kubelet reads back from the static pod directory.
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("manifest does not decode strictly as a Pod: %v\n%s", err, data)
	}
	if probs := staticPodProblems(&pod); len(probs) > 0 {
		t.Errorf("manifest is not a valid static pod:\n  %s\n%s", strings.Join(probs, "\n  "), data)
	}
	if pod.Name != "db-0" || pod.Namespace != "prod" {
		t.Errorf("identity %s/%s, want prod/db-0", pod.Namespace, pod.Name)
	}
	// Services and NetworkPolicies select the copy by them.
	if len(pod.Labels) != 1 || pod.Labels["app"] != "db" {
		t.Errorf("labels %v, want the parent's app=db", pod.Labels)
	}
	wantAnn := map[string]string{
		contract.AnnotationCheckpointOf:     "prod/db-0",
		contract.AnnotationCheckpointUID:    "1111-2222",
		contract.AnnotationReservedDuration: "30", // the parent's, not the default
		"example.com/keep":                  "yes",
	}
	for k, v := range wantAnn {
		if pod.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, pod.Annotations[k], v)
		}
	}
	for _, k := range []string{contract.AnnotationCheckpoint, "kubectl.kubernetes.io/last-applied-configuration", "kubernetes.io/config.seen"} {
		if _, ok := pod.Annotations[k]; ok {
			t.Errorf("annotation %s kept, want dropped", k)
		}
	}
	if IsCopy(&pod) != true || OptedIn(&pod) {
		t.Error("the copy must be recognised as a copy and must not be opted in (or it would be checkpointed itself)")
	}
	if pod.Spec.Hostname != "db-0" || pod.Spec.Subdomain != "db" {
		t.Errorf("hostname/subdomain %q/%q, want the parent's db-0/db", pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	if pod.Spec.NodeSelector != nil || pod.Spec.Affinity != nil || pod.Spec.SchedulerName != "" || pod.Spec.Overhead != nil {
		t.Error("scheduling fields kept")
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s pull policy %s, want IfNotPresent", c.Name, c.ImagePullPolicy)
		}
	}
	if len(pod.Spec.InitContainers[0].VolumeMounts) != 0 {
		t.Error("service account token mount kept in init container")
	}
}

func TestManifestVolumes(t *testing.T) {
	res, err := Manifest(apiRecord(), Options{VolumeDir: "/run/ckd"})
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range res.Pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if _, ok := vols["kube-api-access-abcde"]; ok {
		t.Error("service account token volume kept")
	}
	if vols["data"].HostPath == nil || vols["data"].HostPath.Path != "/srv/db" {
		t.Errorf("hostPath volume changed: %+v", vols["data"])
	}
	for name, want := range map[string]string{"tls": "/run/ckd/prod_db-0/tls", "config": "/run/ckd/prod_db-0/config"} {
		hp := vols[name].HostPath
		if hp == nil || hp.Path != want || hp.Type == nil || *hp.Type != corev1.HostPathDirectory {
			t.Errorf("volume %s = %+v, want hostPath directory %s", name, vols[name].VolumeSource, want)
		}
	}
	for _, m := range res.Pod.Spec.Containers[0].VolumeMounts {
		if (m.Name == "tls" || m.Name == "config") && !m.ReadOnly {
			t.Errorf("mount %s not read-only", m.Name)
		}
	}
	// Modes as the kubelet sets them: item mode, else defaultMode, else 0644;
	// fsGroup 2000 adds group read and owns the files.
	type fileWant struct {
		data string
		mode uint32
	}
	want := map[string]fileWant{
		"prod_db-0/tls/private/tls.key": {"KEY", 0o440},       // defaultMode 0400 | 0440
		"prod_db-0/tls/tls.crt":         {"CRT", 0o444},       // item mode 0444
		"prod_db-0/config/db.conf":      {"port=5432", 0o644}, // default 0644
		"prod_db-0/config/mode":         {"replica", 0o644},
	}
	if len(res.Files) != len(want) {
		t.Errorf("%d files, want %d: %+v", len(res.Files), len(want), res.Files)
	}
	// In path order: the same checkpoint gives the same files, in the same order.
	for i := 1; i < len(res.Files); i++ {
		if res.Files[i-1].Path > res.Files[i].Path {
			t.Errorf("files out of order: %s before %s", res.Files[i-1].Path, res.Files[i].Path)
		}
	}
	for _, f := range res.Files {
		w, ok := want[f.Path]
		if !ok {
			t.Errorf("unexpected file %s (the secret's unlisted key must not be written)", f.Path)
			continue
		}
		if string(f.Data) != w.data || f.Mode != w.mode {
			t.Errorf("file %s = %q mode %o, want %q mode %o", f.Path, f.Data, f.Mode, w.data, w.mode)
		}
		if f.GID == nil || *f.GID != 2000 {
			t.Errorf("file %s gid %v, want fsGroup 2000", f.Path, f.GID)
		}
	}
}

func TestManifestModesNeverWiden(t *testing.T) {
	rec := apiRecord()
	rec.Pod.Spec.SecurityContext = nil // no fsGroup: modes exactly as given
	res, err := Manifest(rec, Options{VolumeDir: "/run/ckd"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		if f.GID != nil {
			t.Errorf("%s: group set without fsGroup", f.Path)
		}
		if strings.HasSuffix(f.Path, "tls.key") && f.Mode != 0o400 {
			t.Errorf("%s mode %o, want the pod's 0400", f.Path, f.Mode)
		}
		if f.Mode&0o002 != 0 {
			t.Errorf("%s is world-writable", f.Path)
		}
	}
}

func TestManifestEnv(t *testing.T) {
	res, err := Manifest(apiRecord(), Options{VolumeDir: "/run/ckd"})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range res.Pod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if env["MODE"].Value != "replica" || env["MODE"].ValueFrom != nil {
		t.Errorf("configMapKeyRef not inlined: %+v", env["MODE"])
	}
	if env["DB_HOST"].Value != "h" {
		t.Errorf("envFrom configMap not inlined with prefix: %+v", env)
	}
	if _, ok := env["DB_bad-name!"]; ok {
		t.Error("invalid env name from configMap kept")
	}
	if _, ok := env["PASSWORD"]; ok {
		t.Error("secret env var written into the manifest")
	}
	if env["POD_NAME"].ValueFrom == nil || env["POD_NAME"].ValueFrom.FieldRef == nil {
		t.Error("fieldRef env dropped; static pods support it")
	}
	if env["PLAIN"].Value != "1" {
		t.Error("plain env lost")
	}
	joined := strings.Join(res.Warnings, "\n")
	for _, w := range []string{"PASSWORD", "db-secret-env", "imagePullSecrets"} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings %q do not mention %s", joined, w)
		}
	}
	data, _ := Marshal(res.Pod)
	if strings.Contains(string(data), "KEY") || strings.Contains(string(data), "CRT") {
		t.Error("secret data appears in the manifest")
	}

	// Nothing to drop, nothing said.
	rec := apiRecord()
	rec.Pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{}
	if res, err := Manifest(rec, Options{VolumeDir: "/run/ckd"}); err != nil || strings.Contains(strings.Join(res.Warnings, "\n"), "imagePullSecrets") {
		t.Errorf("a pod without imagePullSecrets: warnings %q (%v)", res.Warnings, err)
	}
}

func TestManifestReservationDefault(t *testing.T) {
	for _, parent := range []string{"", "0"} {
		rec := apiRecord()
		if parent == "" {
			delete(rec.Pod.Annotations, contract.AnnotationReservedDuration)
		} else {
			rec.Pod.Annotations[contract.AnnotationReservedDuration] = parent
		}
		res, err := Manifest(rec, Options{VolumeDir: "/v", Reservation: "10m"})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Pod.Annotations[contract.AnnotationReservedDuration]; got != "10m" {
			t.Errorf("parent %q: reservation %q, want the default 10m", parent, got)
		}
	}
}

func TestManifestUnsupported(t *testing.T) {
	cases := map[string]func(*corev1.Pod){
		"pvc": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "pvc", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}})
		},
		"ephemeral": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "eph", VolumeSource: corev1.VolumeSource{
				Ephemeral: &corev1.EphemeralVolumeSource{}}})
		},
		"resource claims": func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			rec := apiRecord()
			mutate(rec.Pod)
			_, err := Manifest(rec, Options{VolumeDir: "/v"})
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("err = %v, want ErrUnsupported", err)
			}
		})
	}
}

func TestManifestMissingData(t *testing.T) {
	rec := apiRecord()
	delete(rec.Secrets, "db-tls")
	if _, err := Manifest(rec, Options{VolumeDir: "/v"}); err == nil || !strings.Contains(err.Error(), "db-tls") {
		t.Errorf("missing required secret: err = %v, want one naming db-tls", err)
	}
	rec.Pod.Spec.Volumes[1].Secret.Optional = ptr(true)
	res, err := Manifest(rec, Options{VolumeDir: "/v"})
	if err != nil {
		t.Fatalf("missing optional secret: %v", err)
	}
	for _, f := range res.Files {
		if strings.Contains(f.Path, "/tls/") {
			t.Errorf("file %s for a missing optional secret", f.Path)
		}
	}
}

func TestUnsafeItemPathRejected(t *testing.T) {
	rec := apiRecord()
	rec.Pod.Spec.Volumes[1].Secret.Items[0].Path = "../../etc/evil"
	if _, err := Manifest(rec, Options{VolumeDir: "/v"}); err == nil || !strings.Contains(err.Error(), "unsafe") {
		t.Errorf("err = %v, want unsafe path error", err)
	}
}

// TestRefs: a checkpoint reads only the objects, and stores only the keys,
// that the pod actually mounts or references (SPEC: "on disk, only the
// keys a pod actually mounts or references").
func TestRefs(t *testing.T) {
	got := map[string]Ref{}
	for _, r := range Refs(apiPod()) {
		got[r.Kind+"/"+r.Name] = r
	}
	want := map[string][]string{
		"Secret/db-tls":       {"tls.crt", "tls.key"}, // items only
		"ConfigMap/db-config": nil,                    // mounted whole (and one key read by env)
		"ConfigMap/db-env":    nil,                    // envFrom: every key
	}
	if len(got) != len(want) {
		t.Errorf("refs %v, want %v (env-only secrets are never read; kube-root-ca.crt belongs to the dropped token volume)", got, want)
	}
	for k, keys := range want {
		r, ok := got[k]
		if !ok || strings.Join(r.Keys, ",") != strings.Join(keys, ",") || (keys == nil) != (r.Keys == nil) || r.Optional {
			t.Errorf("%s: %+v, want keys %v, not optional", k, r, keys)
		}
	}
	data := map[string][]byte{"tls.key": []byte("K"), "tls.crt": []byte("C"), "unused": []byte("x")}
	if f := got["Secret/db-tls"].Filter(data); len(f) != 2 || f["unused"] != nil {
		t.Errorf("Filter kept %v; want only tls.key and tls.crt", f)
	}

	// A key read by env alone is all that is kept of that configMap.
	p := apiPod()
	p.Spec.Volumes = p.Spec.Volumes[:2]
	p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[:2]
	p.Spec.Containers[0].EnvFrom = nil
	p.Spec.Volumes[1].Secret.Optional = ptr(true)
	for _, r := range Refs(p) {
		switch r.Kind + "/" + r.Name {
		case "ConfigMap/db-config":
			if strings.Join(r.Keys, ",") != "mode" {
				t.Errorf("db-config keys %v, want [mode]", r.Keys)
			}
		case "Secret/db-tls":
			if !r.Optional {
				t.Error("db-tls not reported optional")
			}
		default:
			t.Errorf("unexpected ref %+v", r)
		}
	}
}

// TestHostnameOnlyWhenValid: a parent whose name is not a
// valid host name (a dot, more than 63 characters) must not get it as
// spec.hostname: the kubelet rejects such a static pod.
func TestHostnameOnlyWhenValid(t *testing.T) {
	for _, name := range []string{"web.v2", strings.Repeat("a", 64)} {
		rec := apiRecord()
		rec.Pod.Name = name
		res, err := Manifest(rec, Options{VolumeDir: "/v"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Pod.Spec.Hostname != "" {
			t.Errorf("pod %q: spec.hostname %q set", name, res.Pod.Spec.Hostname)
		}
		if err := Validate(res.Pod, "node1"); err != nil {
			t.Errorf("pod %q: copy fails validation: %v", name, err)
		}
	}
}

// TestValidate: what the kubelet rejects is refused before the file is written.
func TestValidate(t *testing.T) {
	res, err := Manifest(apiRecord(), Options{VolumeDir: "/v"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(res.Pod, "node1"); err != nil {
		t.Fatalf("valid copy rejected: %v", err)
	}
	noSubdomain := res.Pod.DeepCopy()
	noSubdomain.Spec.Subdomain = ""
	if err := Validate(noSubdomain, "node1"); err != nil {
		t.Fatalf("valid copy without a subdomain rejected: %v", err)
	}
	// The annotations' keys and values together may fill the API's limit
	// exactly.
	atLimit := res.Pod.DeepCopy()
	size := 0
	for k, v := range atLimit.Annotations {
		size += len(k) + len(v)
	}
	atLimit.Annotations["example.com/big"] = strings.Repeat("x", maxAnnotationsSize-size-len("example.com/big"))
	if err := Validate(atLimit, "node1"); err != nil {
		t.Fatalf("annotations of exactly %d bytes rejected: %v", maxAnnotationsSize, err)
	}
	for name, tc := range map[string]struct {
		mut  func(*corev1.Pod)
		node string
		want string
	}{
		"static name too long":   {func(p *corev1.Pod) { p.Name = strings.Repeat("a", 250) }, "node1", "metadata.name"},
		"hostname with a dot":    {func(p *corev1.Pod) { p.Spec.Hostname = "a.b" }, "node1", "spec.hostname"},
		"duplicate container":    {func(p *corev1.Pod) { p.Spec.InitContainers[0].Name = "db" }, "node1", "Duplicate"},
		"mount of a missing vol": {func(p *corev1.Pod) { p.Spec.Volumes = p.Spec.Volumes[1:] }, "node1", "volumeMounts"},
		"bad env name": {func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "A=B"})
		}, "node1", "env"},
		"no image":           {func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, "node1", "image"},
		"bad annotation key": {func(p *corev1.Pod) { p.Annotations["bad key!"] = "x" }, "node1", "annotations"},
		"annotations too large": {func(p *corev1.Pod) {
			p.Annotations["example.com/big"] = strings.Repeat("x", maxAnnotationsSize)
		}, "node1", "metadata.annotations: Too long"},
		"subdomain with a dot":        {func(p *corev1.Pod) { p.Spec.Subdomain = "a.b" }, "node1", "spec.subdomain"},
		"node name makes it too long": {func(p *corev1.Pod) {}, strings.Repeat("n", 250), "metadata.name"},
	} {
		p := res.Pod.DeepCopy()
		tc.mut(p)
		err := Validate(p, tc.node)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrInvalid mentioning %q", name, err, tc.want)
		}
	}
}

func TestOptInAndCopies(t *testing.T) {
	for _, k := range []string{contract.AnnotationCheckpoint, contract.AnnotationBootstrapCheckpoint, contract.AnnotationCoreOSCheckpoint} {
		if !OptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: "true"}}}) {
			t.Errorf("%s=true not honoured", k)
		}
		if OptedIn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: "false"}}}) {
			t.Errorf("%s=false taken as opt-in", k)
		}
	}
	for name, ann := range map[string]map[string]string{
		"mirror":      {contract.AnnotationConfigMirror: "x"},
		"static file": {contract.AnnotationConfigSource: "file"},
		"copy":        {contract.AnnotationCheckpointOf: "a/b"},
	} {
		if !IsCopy(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}) {
			t.Errorf("%s pod not recognised as a copy", name)
		}
	}
	if IsCopy(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.AnnotationConfigSource: "api"}}}) {
		t.Error("API pod taken for a copy")
	}
}

func TestVolumeRoot(t *testing.T) {
	if got := filepath.Join("/v", VolumeRoot(checkpoint.ID{Namespace: "a", Name: "b"})); got != "/v/a_b" {
		t.Errorf("VolumeRoot = %s", got)
	}
}
