package sanitize

import (
	"bytes"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// decodeAsKubelet reads a manifest as the kubelet's file source does
// (pkg/kubelet/config/common.go): utilyaml.ToJSON (JSON passes through
// untouched, YAML is converted), then the API's deserializer.
func decodeAsKubelet(t *testing.T, data []byte) *corev1.Pod {
	t.Helper()
	j, err := utilyaml.ToJSON(data)
	if err != nil {
		t.Fatalf("the kubelet could not read the manifest: %v\n%s", err, data)
	}
	obj, err := runtime.Decode(scheme.Codecs.UniversalDeserializer(), j)
	if err != nil {
		t.Fatalf("the kubelet could not decode the manifest: %v\n%s", err, data)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		t.Fatalf("manifest is a %T, not a Pod\n%s", obj, data)
	}
	return pod
}

// sameManifest fails unless decoded is the pod Marshal was given.
func sameManifest(t *testing.T, want, decoded *corev1.Pod) {
	t.Helper()
	w := want.DeepCopy()
	w.Status = corev1.PodStatus{}
	w.TypeMeta = decoded.TypeMeta
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(decoded)
	if !bytes.Equal(a, b) {
		t.Fatalf("manifest does not read back as the same pod:\n want %s\n got  %s", a, b)
	}
}

// A pod from the API may carry characters a YAML reader refuses (DEL, C1
// controls, U+FFFF) in an env value, an argument or an annotation; its
// manifest must still be written and read back unchanged. Found by
// FuzzManifest: Marshal failed with "control characters are not allowed".
func TestMarshalControlCharacters(t *testing.T) {
	pod := apiPod()
	pod.Annotations["example.com/odd"] = "a\x7fb\u0090c\u0085d\uffff"
	pod.Spec.Containers[0].Args = []string{"--sep=\x7f", "tab\there", "line\nbreak", "\u2028"}
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "ODD", Value: "\u009f\ufffe"})
	data, err := Marshal(pod)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	got := decodeAsKubelet(t, data)
	if got.APIVersion != "v1" || got.Kind != "Pod" {
		t.Errorf("manifest type %s/%s, want v1/Pod", got.APIVersion, got.Kind)
	}
	sameManifest(t, pod, got)
}

// A "<<" key in a free-form map was written unquoted in the YAML manifest,
// and the kubelet's YAML reader took it for a merge key: the copy never
// started ("map merge requires map or sequence of maps as the value").
// JSON manifests are read back as written.
func TestMarshalMergeKey(t *testing.T) {
	pod := apiPod()
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "example.com/d",
			VolumeAttributes: map[string]string{"<<": "*anchor", "&a": "!!binary", "? x": "- y", "key: v": "#c"}}}},
		corev1.Volume{Name: "flex", VolumeSource: corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/f",
			Options: map[string]string{"<<": "{a: 1}"}}}})
	pod.Annotations["example.com/yaml"] = "<<: *a"
	data, err := Marshal(pod)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if !bytes.HasPrefix(data, []byte("{")) {
		t.Fatalf("manifest is not JSON, the kubelet would read it through YAML:\n%s", data)
	}
	sameManifest(t, pod, decodeAsKubelet(t, data))
}
