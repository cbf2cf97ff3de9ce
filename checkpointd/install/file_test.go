package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func inode(t *testing.T, p string) (uint64, time.Time) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino, st.ModTime()
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "stickyip")
	if changed, err := WriteFile(p, []byte("v1"), 0o755); err != nil || !changed {
		t.Fatalf("first install: changed=%v err=%v", changed, err)
	}
	ino, mtime := inode(t, p)
	time.Sleep(20 * time.Millisecond)
	if changed, err := WriteFile(p, []byte("v1"), 0o755); err != nil || changed {
		t.Fatalf("same content again: changed=%v err=%v, want a no-op", changed, err)
	}
	if ino2, mtime2 := inode(t, p); ino2 != ino || !mtime2.Equal(mtime) {
		t.Errorf("a no-op install replaced the file: inode %d→%d, mtime %v→%v", ino, ino2, mtime, mtime2)
	}
	// A leftover of an installer killed mid-write goes with the next install.
	leftover := filepath.Join(dir, ".stickyip.123")
	if err := os.WriteFile(leftover, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data []byte
		mode os.FileMode
	}{{[]byte("v2"), 0o755}, {[]byte("v2"), 0o700}} {
		if changed, err := WriteFile(p, tc.data, tc.mode); err != nil || !changed {
			t.Fatalf("install %q %o: changed=%v err=%v", tc.data, tc.mode, changed, err)
		}
		b, _ := os.ReadFile(p)
		st, _ := os.Stat(p)
		if !bytes.Equal(b, tc.data) || st.Mode().Perm() != tc.mode {
			t.Errorf("after install of %q %o: %q %o", tc.data, tc.mode, b, st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only stickyip (no temporary files)", names)
	}
	if _, err := WriteFile(filepath.Join(dir, "missing", "x"), []byte("x"), 0o644); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "missing", "x")) {
		t.Errorf("install into a missing directory: err = %v, want one naming the path", err)
	}
}

// buildPlugin builds the real plugin binary with version v.
func buildPlugin(t *testing.T, out, v string) []byte {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", out,
		"-ldflags=-s -w -X github.com/stickyip/stickyip/contract.Version="+v, "../../plugins/ipam/stickyip")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInstallWhileExecuting replaces the installed plugin over and over
// (two versions, alternating) while other processes execute it as a runtime
// would: every exec must run a whole binary, old or new. The executing loops
// are shell processes, as a runtime is another process than the installer
// (in one Go process, a child forked meanwhile inherits the temporary file's
// write descriptor until it execs, and an exec of the renamed file then fails
// with ETXTBSY: golang/go#22315).
func TestInstallWhileExecuting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin twice")
	}
	src, work := t.TempDir(), t.TempDir()
	versions := []string{"v-install-test-1", "v-install-test-2"}
	bins := [][]byte{buildPlugin(t, filepath.Join(src, "a"), versions[0]), buildPlugin(t, filepath.Join(src, "b"), versions[1])}
	dst := filepath.Join(work, "stickyip")
	if _, err := WriteFile(dst, bins[0], 0o755); err != nil {
		t.Fatal(err)
	}
	stop := filepath.Join(work, "stop")
	loop := `while [ ! -e "$STOP" ]; do
  if out=$("$BIN" version 2>&1); then
    case "$out" in *v-install-test-[12]*) echo ok ;; *) echo "FAIL unexpected output: $out" ;; esac
  else echo "FAIL exit $?: $out"; fi
done`
	var outs []*bytes.Buffer
	var cmds []*exec.Cmd
	for w := 0; w < 3; w++ {
		cmd := exec.Command("sh", "-c", loop)
		cmd.Env = append(os.Environ(), "BIN="+dst, "STOP="+stop)
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	const installs = 100
	for i := 1; i <= installs; i++ {
		if changed, err := WriteFile(dst, bins[i%2], 0o755); err != nil || !changed {
			t.Fatalf("install %d: changed=%v err=%v", i, changed, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	execs, failures := 0, 0
	var first string
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("exec loop %d: %v", i, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(outs[i].String()), "\n") {
			execs++
			if l != "ok" {
				failures++
				if first == "" {
					first = l
				}
			}
		}
	}
	t.Logf("%d installs, %d execs of the installed binary meanwhile, %d failed", installs, execs, failures)
	if execs < 50 {
		t.Errorf("only %d execs ran during the installs: the test did not exercise the race", execs)
	}
	if failures > 0 {
		t.Errorf("%d execs failed during installs; first: %s", failures, first)
	}
}
