package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness/strict"
)

// cmdTimeout bounds every external command the harness runs.
const cmdTimeout = 60 * time.Second

// UpstreamPlugins are the CNI plugins scripts/install-deps.sh builds into
// <repo>/_output/cni/bin.
var UpstreamPlugins = []string{"bridge", "loopback", "portmap", "bandwidth", "host-local", "flannel"}

// systemTools are the Debian-packaged programs the harness runs (containerd
// comes from ContainerdBinDir).
var systemTools = []string{"runc", "ip", "iptables", "nsenter"}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// RepoRoot returns the directory holding the project's go.mod.
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = fmt.Errorf("no go.mod above the working directory")
				return
			}
			dir = parent
		}
	})
	return rootDir, rootErr
}

// OutputDir returns <repo>/_output, where scripts/install-deps.sh installs.
// $STICKYIP_OUTPUT overrides it.
func OutputDir() string {
	if d := os.Getenv("STICKYIP_OUTPUT"); d != "" {
		return d
	}
	root, err := RepoRoot()
	if err != nil {
		return "_output"
	}
	return filepath.Join(root, "_output")
}

// UpstreamBinDir is the directory holding the upstream CNI plugins.
func UpstreamBinDir() string { return filepath.Join(OutputDir(), "cni", "bin") }

// CNIToolPath is the path of the pinned cnitool.
func CNIToolPath() string { return filepath.Join(OutputDir(), "tools", "cnitool") }

// StrictEnv names the environment variable of strict mode (strict.Env):
// set, a dependency a test needs that is missing fails the test instead of
// skipping it.
const StrictEnv = strict.Env

// Strict reports whether strict mode is on (StrictEnv).
func Strict() bool { return strict.On() }

// Missing skips t for a missing dependency (why), or fails it in strict
// mode.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	strict.Missing(t, format, args...)
}

// RequireRoot skips the test (fails it in strict mode) unless it runs as
// root with every tool the harness needs installed (Debian packages and the
// binaries of scripts/install-deps.sh).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "real-path tests need root (network namespaces, containerd)")
	}
	var missing []string
	for _, tool := range systemTools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, p := range UpstreamPlugins {
		if _, err := os.Stat(filepath.Join(UpstreamBinDir(), p)); err != nil {
			missing = append(missing, filepath.Join(UpstreamBinDir(), p))
		}
	}
	if _, err := os.Stat(CNIToolPath()); err != nil {
		missing = append(missing, CNIToolPath())
	}
	missing = append(missing, missingContainerd()...)
	if len(missing) > 0 {
		Missing(t, "missing %s (run scripts/install-deps.sh)", strings.Join(missing, ", "))
	}
}

// CNIBinDir makes a temporary directory holding the upstream plugins and the
// given extra binaries (e.g. bin/stickyip), as symlinks, for a runtime's CNI
// bin_dir or cnitool's CNI_PATH.
func CNIBinDir(t testing.TB, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range UpstreamPlugins {
		if err := os.Symlink(filepath.Join(UpstreamBinDir(), p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range extra {
		abs, err := filepath.Abs(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(abs); err != nil {
			t.Fatalf("CNI binary %s: %v", e, err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, filepath.Base(abs))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ShortTempDir makes a directory with a short path (unix socket paths are
// limited to 108 bytes, and t.TempDir paths can be long); removed at cleanup.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sip-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Run runs a command with a timeout and returns its stdout; on failure the
// error carries stderr. env entries are added to the process environment.
func Run(env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s%s", name, strings.Join(args, " "), err,
			strings.TrimSpace(stderr.String()), strings.TrimSpace(stdout.String()))
	}
	return stdout.String(), nil
}

// MustRun is Run that fails the test on error.
func MustRun(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	out, err := Run(env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Eventually calls f every interval until it returns nil or timeout passes,
// and returns f's last error.
func Eventually(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}
