package daemon

import (
	"path/filepath"
	"testing"
)

// FuzzParseStaticPodPath: any kubelet config file gives a clean absolute
// path or an error, never a panic.
func FuzzParseStaticPodPath(f *testing.F) {
	f.Add([]byte("kind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\n"))
	f.Add([]byte("kind: KubeletConfiguration\nstaticPodPath: relative\n"))
	f.Add([]byte("{\"kind\":\"KubeletConfiguration\",\"staticPodPath\":\"/a/../b\"}"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parseStaticPodPath(data)
		if err != nil {
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Fatalf("accepted %q", p)
		}
	})
}
