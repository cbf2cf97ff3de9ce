package sanitize

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
)

// FuzzManifest feeds arbitrary pods (as the API could return them, and as a
// checkpoint file could hold them) to Manifest and Validate: never a panic,
// and every copy they accept keeps the promises of the package doc.
func FuzzManifest(f *testing.F) {
	seed, _ := json.Marshal(apiPod())
	f.Add(seed, []byte(`{"db-tls":{"tls.key":"S0VZ","tls.crt":"Q1JU"}}`))
	f.Add([]byte(`{"metadata":{"name":"a","namespace":"b"},"spec":{"volumes":[{"name":"v","secret":{"secretName":"s","items":[{"key":"k","path":"../x"}]}}],"containers":[{"name":"c","image":"i"}]}}`), []byte(`{"s":{"k":"eA=="}}`))
	// A YAML merge key in a free-form map.
	f.Add([]byte(`{"metadata":{"name":"a","namespace":"b"},"spec":{"volumes":[{"name":"v","csi":{"driver":"d","volumeAttributes":{"<<":"*x"}}}],"containers":[{"name":"c","image":"i"}]}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, podJSON, secretsJSON []byte) {
		var pod corev1.Pod
		if json.Unmarshal(podJSON, &pod) != nil || pod.Name == "" || pod.Namespace == "" {
			return
		}
		rec := &checkpoint.Record{Pod: &pod}
		_ = json.Unmarshal(secretsJSON, &rec.Secrets)
		res, err := Manifest(rec, Options{VolumeDir: "/run/v", Reservation: "10m"})
		if err != nil {
			return
		}
		_ = Validate(res.Pod, "node1")
		p := res.Pod
		if p.Spec.NodeName != "" || p.Spec.ServiceAccountName != "" || p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Fatalf("copy keeps API-only references: nodeName %q sa %q", p.Spec.NodeName, p.Spec.ServiceAccountName)
		}
		if p.Annotations[contract.AnnotationCheckpointOf] != pod.Namespace+"/"+pod.Name {
			t.Fatalf("checkpoint-of %q", p.Annotations[contract.AnnotationCheckpointOf])
		}
		if h := p.Spec.Hostname; h != "" && h != pod.Spec.Hostname && !contract.IsDNSLabel(h) {
			t.Fatalf("derived an invalid hostname %q", h)
		}
		for _, v := range p.Spec.Volumes {
			if v.Secret != nil || v.ConfigMap != nil || (v.Projected != nil && !hasToken(v.Projected)) {
				t.Fatalf("volume %q still needs the API server", v.Name)
			}
		}
		root := VolumeRoot(rec.ID()) + "/"
		for _, fl := range res.Files {
			if !strings.HasPrefix(fl.Path, root) || path.Clean(fl.Path) != fl.Path || strings.Contains(fl.Path, "..") {
				t.Fatalf("file %q escapes %s", fl.Path, root)
			}
		}
		data, err := Marshal(p)
		if err != nil {
			t.Fatalf("accepted copy does not marshal: %v", err)
		}
		sameManifest(t, p, decodeAsKubelet(t, data))
	})
}
