//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// TestMakeInstall runs `make install`, the README's first command, into a
// DESTDIR: the plugin lands in /opt/cni/bin and checkpointd in
// /usr/local/bin, both executable by everyone, and both report the one
// version make built them with.
func TestMakeInstall(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	out, err := exec.Command("make", "-C", root, "--no-print-directory", "install", "DESTDIR="+dest).CombinedOutput()
	if err != nil {
		t.Fatalf("make install DESTDIR=%s: %v\n%s", dest, err, out)
	}
	versions := map[string]string{}
	for _, b := range []struct{ path, versionArg string }{
		{"opt/cni/bin/stickyip", "version"},
		{"usr/local/bin/checkpointd", "--version"},
	} {
		p := filepath.Join(dest, b.path)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want 0755", b.path, fi.Mode().Perm())
		}
		v, err := exec.Command(p, b.versionArg).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", b.path, b.versionArg, err)
		}
		// "stickyip <version> (store schema N)", "checkpointd <version>"
		f := strings.Fields(string(v))
		if len(f) < 2 {
			t.Fatalf("%s %s printed %q", b.path, b.versionArg, v)
		}
		versions[b.path] = f[1]
	}
	if versions["opt/cni/bin/stickyip"] != versions["usr/local/bin/checkpointd"] {
		t.Errorf("installed versions differ: %v", versions)
	}
	t.Logf("make install DESTDIR=…: %v", versions)
}
