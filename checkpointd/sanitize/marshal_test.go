package sanitize

import (
	"bytes"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// decodeAsKubelet reads a manifest as the kubelet's file source does: YAML
// to JSON, then JSON to a Pod.
func decodeAsKubelet(t *testing.T, data []byte) *corev1.Pod {
	t.Helper()
	j, err := utilyaml.ToJSON(data)
	if err != nil {
		t.Fatalf("the kubelet could not read the manifest: %v\n%s", err, data)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(j, &pod); err != nil {
		t.Fatalf("manifest is not a Pod: %v\n%s", err, data)
	}
	return &pod
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

func TestEscapeForYAMLLeavesPrintableTextAlone(t *testing.T) {
	in := []byte(`{"a":"héllo \u003c 世界 🙂","b":[1,2]}`)
	if out := escapeForYAML(in); !bytes.Equal(out, in) {
		t.Fatalf("escapeForYAML changed printable text: %s", out)
	}
	if out := escapeForYAML([]byte("{\"a\":\"x\x7fy\"}")); string(out) != `{"a":"x\u007fy"}` {
		t.Fatalf("DEL not escaped: %s", out)
	}
}
