package formats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// StaticPodPath reads staticPodPath from the KubeletConfiguration file at
// path.
func StaticPodPath(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	p, err := ParseStaticPodPath(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParseStaticPodPath returns the staticPodPath of a KubeletConfiguration:
// a clean absolute path, or an error saying why there is none.
func ParseStaticPodPath(data []byte) (string, error) {
	var kc struct {
		Kind          string `json:"kind"`
		StaticPodPath string `json:"staticPodPath"`
	}
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return "", err
	}
	if kc.Kind != "KubeletConfiguration" {
		return "", fmt.Errorf("kind %q, want KubeletConfiguration", kc.Kind)
	}
	if kc.StaticPodPath == "" {
		return "", errors.New("it sets no staticPodPath: this kubelet runs no static pods, so nothing can be restored")
	}
	if !filepath.IsAbs(kc.StaticPodPath) {
		return "", fmt.Errorf("staticPodPath %q is not an absolute path", kc.StaticPodPath)
	}
	return filepath.Clean(kc.StaticPodPath), nil
}
