package daemon

import (
	"os"
	"path/filepath"
	"testing"
)

// TestResolveStaticPodDir: --kubelet-config's staticPodPath wins over
// --static-pod-dir; without it --static-pod-dir stands; a kubelet config that
// cannot be read is an error, never a silent fallback.
func TestResolveStaticPodDir(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(kc, []byte("kind: KubeletConfiguration\nstaticPodPath: /srv/manifests\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
		err  bool
	}{
		{Config{StaticPodDir: "/etc/kubernetes/manifests"}, "/etc/kubernetes/manifests", false},
		{Config{StaticPodDir: "/etc/kubernetes/manifests", KubeletConfig: kc}, "/srv/manifests", false},
		{Config{StaticPodDir: "/etc/kubernetes/manifests", KubeletConfig: kc + ".missing"}, "", true},
	} {
		got, err := tc.cfg.ResolveStaticPodDir()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%+v: %q, %v; want %q, error %v", tc.cfg, got, err, tc.want, tc.err)
		}
	}
}
