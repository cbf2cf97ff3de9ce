//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// kubectlTimeout bounds one kubectl command (a rollout status waits).
const kubectlTimeout = 5 * time.Minute

// kubectl runs the real kubectl of the run (_output/k8s/bin) as admin
// against the API server, from inside the control plane's network namespace,
// and returns its output; a failure fails the test with that output.
func (cp *controlPlane) kubectl(args ...string) string {
	cp.t.Helper()
	out, err := cp.kubectlErr(args...)
	if err != nil {
		cp.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlErr is kubectl returning its error (and combined output) instead.
func (cp *controlPlane) kubectlErr(args ...string) (string, error) {
	t := cp.t
	t.Helper()
	cp.bins.require(t, "kubectl")
	kc := filepath.Join(cp.dir, "admin.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		cp.writeKubeconfig(kc, adminUser)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	argv := append([]string{"--net=" + cp.ns.Path, filepath.Join(cp.bins.k8s, "kubectl"), "--kubeconfig=" + kc}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
	return string(out), err
}

// stranded runs `checkpointd stranded` as an administrator would (the
// admin kubeconfig kubectl uses), and returns its output and exit status.
func (cp *controlPlane) stranded() (string, int) {
	t := cp.t
	t.Helper()
	kc := filepath.Join(cp.dir, "admin.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		cp.writeKubeconfig(kc, adminUser)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+cp.ns.Path, filepath.Join(cp.bins.project, "checkpointd"), "stranded", "--kubeconfig="+kc).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("checkpointd stranded: %v\n%s", err, out)
	return "", -1
}
