//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// helmTimeout bounds one helm command (an install or upgrade waits for
// its rollout).
const helmTimeout = 6 * time.Minute

// helmBin is the pinned Helm (scripts/install-helm.sh, run by make
// e2e-deps).
func helmBin() string { return filepath.Join(harness.OutputDir(), "tools", "helm") }

// helm runs the pinned Helm as admin against the API server, from inside
// the control plane's network namespace as kubectl does, with Helm's own
// directories in the test's (no user configuration), and returns its
// output; a failure fails the test with that output.
func (cp *controlPlane) helm(args ...string) string {
	cp.t.Helper()
	out, err := cp.helmErr(args...)
	if err != nil {
		cp.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// helmErr is helm returning its error (and combined output) instead.
func (cp *controlPlane) helmErr(args ...string) (string, error) {
	t := cp.t
	t.Helper()
	if _, err := os.Stat(helmBin()); err != nil {
		missing(t, "%s missing (run scripts/install-helm.sh, or make test-e2e)", helmBin())
	}
	kc := filepath.Join(cp.dir, "admin.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		cp.writeKubeconfig(kc, adminUser)
	}
	home := filepath.Join(cp.dir, "helm")
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	argv := append([]string{"--net=" + cp.ns.Path, helmBin(), "--kubeconfig=" + kc}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}
