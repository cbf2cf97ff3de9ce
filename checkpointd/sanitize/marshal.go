package sanitize

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Marshal returns the manifest of pod as JSON. The kubelet's file source
// hands JSON (a file starting with '{') straight to the API decoder, without
// its YAML reader, so the copy it runs is exactly the pod checked here: no
// key or value of a free-form map (csi.volumeAttributes, flexVolume.options,
// annotations) can be read as YAML syntax, a merge key "<<" for one.
func Marshal(pod *corev1.Pod) ([]byte, error) {
	p := pod.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.Status = corev1.PodStatus{}
	j, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return append(j, '\n'), nil
}
