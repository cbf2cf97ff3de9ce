package sanitize

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Marshal returns the YAML manifest of pod, which the kubelet's static pod
// decoder (YAML to JSON, then the API decoder) reads back as the same pod.
func Marshal(pod *corev1.Pod) ([]byte, error) {
	p := pod.DeepCopy()
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.Status = corev1.PodStatus{}
	j, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	y, err := yaml.JSONToYAML(escapeForYAML(j))
	if err != nil {
		return nil, fmt.Errorf("manifest of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return y, nil
}

// escapeForYAML rewrites as \uXXXX escapes the characters that encoding/json
// leaves raw but a YAML reader refuses ("control characters are not
// allowed": DEL, the C1 controls, U+FFFE and U+FFFF) or reads as a line
// break (NEL, U+0085, which would come back as a space). An API
// pod may carry them in an env value, an argument or an annotation, and both
// the JSON-to-YAML step here and the kubelet read through a YAML parser.
// They can occur only inside JSON strings (everything outside is ASCII
// punctuation, digits and literals), where the escape means the same
// character. encoding/json has already escaped the C0 controls and made the
// text valid UTF-8.
func escapeForYAML(j []byte) []byte {
	var out []byte
	for i := 0; i < len(j); {
		r, n := utf8.DecodeRune(j[i:])
		if yamlRaw(r) {
			if out != nil {
				out = append(out, j[i:i+n]...)
			}
		} else {
			if out == nil {
				out = append(make([]byte, 0, len(j)+16), j[:i]...)
			}
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if out == nil {
		return j
	}
	return out
}

// yamlRaw reports whether r may stand unescaped in a JSON string that a YAML
// 1.1 reader parses: go-yaml's input check, less NEL (a YAML line break).
// The C0 controls and U+2028/U+2029 never reach here raw: encoding/json
// escapes them.
func yamlRaw(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return true
	case r >= 0x20 && r <= 0x7e:
		return true
	case r >= 0xa0 && r <= 0xd7ff, r >= 0xe000 && r <= 0xfffd, r >= 0x10000 && r <= utf8.MaxRune:
		return true
	}
	return false
}
