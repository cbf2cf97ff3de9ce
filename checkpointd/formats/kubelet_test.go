package formats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStaticPodPath(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p, err := StaticPodPath(write("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /srv/manifests/\n"))
	if err != nil || p != "/srv/manifests" {
		t.Fatalf("StaticPodPath = %q, %v", p, err)
	}
	if _, err := StaticPodPath(write("kind: KubeletConfiguration\n")); err == nil || !strings.Contains(err.Error(), "no staticPodPath") {
		t.Errorf("no staticPodPath: err %v", err)
	}
	if _, err := StaticPodPath(write("kind: Pod\n")); err == nil || !strings.Contains(err.Error(), "KubeletConfiguration") {
		t.Errorf("wrong kind: err %v", err)
	}
	if _, err := StaticPodPath(write("kind: KubeletConfiguration\nstaticPodPath: manifests\n")); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("relative staticPodPath: err %v", err)
	}
	if _, err := StaticPodPath(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file was read")
	}
}

// FuzzParseStaticPodPath: any kubelet config file gives a clean absolute
// path or an error, never a panic.
func FuzzParseStaticPodPath(f *testing.F) {
	f.Add([]byte("kind: KubeletConfiguration\nstaticPodPath: /etc/kubernetes/manifests\n"))
	f.Add([]byte("kind: KubeletConfiguration\nstaticPodPath: relative\n"))
	f.Add([]byte("{\"kind\":\"KubeletConfiguration\",\"staticPodPath\":\"/a/../b\"}"))
	f.Add([]byte("- a\n- b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseStaticPodPath(data)
		if err != nil {
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			t.Fatalf("accepted %q", p)
		}
	})
}
