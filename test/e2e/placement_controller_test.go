//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// placementControllerUser is stickyip-controller's identity: its
// ServiceAccount in kube-system, as deploy/placement binds its RBAC to it.
// The e2e control plane gives it a token-file line, so the controller runs
// beside kube-controller-manager, where the manifests schedule it, with
// its own credentials and nothing more.
const placementControllerUser = "system:serviceaccount:kube-system:stickyip-controller"

// nodesGroupUser is a member of system:nodes that is no node (its name is
// not system:node:<name>): the group's RBAC reaches it, the Node authorizer
// and the NodeRecord rule do not.
const nodesGroupUser = "intruder"

// placementControllerAddr is where the controller serves /healthz,
// /readyz and /metrics, in the control plane's network namespace.
const placementControllerAddr = "127.0.0.1:9612"

// startPlacementController starts stickyip-controller (make build) in the
// control plane's namespace with its ServiceAccount's credentials and
// waits until it is ready (its caches synced, its first index written as
// the leader). args are added to its command line.
func (cp *controlPlane) startPlacementController(args ...string) *proc {
	cp.t.Helper()
	bin := filepath.Join(cp.bins.project, "stickyip-controller")
	if _, err := os.Stat(bin); err != nil {
		missing(cp.t, "%s missing (make build)", bin)
	}
	kc := filepath.Join(cp.dir, "stickyip-controller.kubeconfig")
	cp.writeKubeconfig(kc, placementControllerUser)
	argv := append([]string{bin, "--kubeconfig=" + kc, "--listen-address=" + placementControllerAddr}, args...)
	cp.placementController = cp.start("stickyip-controller", argv...)
	cp.waitPlacementControllerReady(2 * time.Minute)
	return cp.placementController
}

// ensurePlacementController starts the controller unless it runs.
func (cp *controlPlane) ensurePlacementController() {
	cp.t.Helper()
	if cp.placementController == nil || !cp.placementController.running() {
		cp.startPlacementController()
	}
}

// stopPlacementController stops it (SIGTERM, then SIGKILL), as a
// control-plane node going away would.
func (cp *controlPlane) stopPlacementController() {
	if cp.placementController != nil {
		cp.placementController.stop(cp.t, syscall.SIGTERM, 10*time.Second)
		cp.placementController = nil
	}
}

// waitPlacementControllerReady waits until the controller answers /readyz.
func (cp *controlPlane) waitPlacementControllerReady(within time.Duration) {
	cp.t.Helper()
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dialIn(cp.nsHandle)}}
	eventually(cp.t, "stickyip-controller ready", within, 200*time.Millisecond, func() (bool, string) {
		if err := cp.placementController.exited(); err != nil {
			cp.t.Fatalf("stickyip-controller exited: %v", err)
		}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+placementControllerAddr+"/readyz", nil)
		resp, err := c.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprint(resp.Status)
	})
}
