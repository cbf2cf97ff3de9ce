package sanitize

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

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
