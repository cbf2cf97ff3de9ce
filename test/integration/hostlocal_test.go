//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/stickyip/stickyip/test/harness"
)

// TestHarnessHostLocal proves the harness itself with upstream host-local as
// the IPAM: cnitool and containerd drive flannel → bridge → host-local inside
// the node namespace, and the pod's eth0 carries the IP it was given.
func TestHarnessHostLocal(t *testing.T) {
	n := newNode(t, flannelConf, "host-local")

	t.Run("cnitool", func(t *testing.T) {
		pod := n.podNetns(t, "pod")
		ips := n.add(t, pod, harness.PodArgs{Namespace: "default", Name: "web", UID: "u1"})
		if len(ips) != 1 || !strings.HasPrefix(ips[0], "10.244.1.") {
			t.Fatalf("cnitool add: got IPs %v, want one in %s", ips, flannelSubnet)
		}
		addrs, err := harness.Addrs(pod.Path, "eth0")
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 1 || !strings.HasPrefix(addrs[0], ips[0]+"/") {
			t.Fatalf("pod eth0 has %v, want %s", addrs, ips[0])
		}
		// host-local records the container in <dataDir>/<network>/<ip>.
		if _, err := os.Stat(filepath.Join(n.hostLocalDir, n.net, ips[0])); err != nil {
			t.Fatalf("host-local did not record %s: %v", ips[0], err)
		}
		// The bridge lives in the node namespace, not on the host.
		if _, err := n.ns.Exec(nil, "ip", "link", "show", "cni0"); err != nil {
			t.Fatalf("no cni0 in the node netns: %v", err)
		}
		if _, err := harness.Run(nil, "ip", "link", "show", "cni0"); err == nil {
			t.Fatal("cni0 exists in the host's network namespace")
		}
		n.del(t, pod, harness.PodArgs{Namespace: "default", Name: "web", UID: "u1"})
		if _, err := os.Stat(filepath.Join(n.hostLocalDir, n.net, ips[0])); !os.IsNotExist(err) {
			t.Fatalf("host-local still records %s after DEL: %v", ips[0], err)
		}
	})

	t.Run("containerd", func(t *testing.T) {
		_, cri := n.startContainerd(t)
		id, ips := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "uid-1",
			Annotations: map[string]string{annDuration: "5"}})
		if len(ips) != 1 || !strings.HasPrefix(ips[0], "10.244.1.") {
			t.Fatalf("pod IPs %v, want one in %s", ips, flannelSubnet)
		}
		data, err := os.ReadFile(filepath.Join(n.hostLocalDir, n.net, ips[0]))
		if err != nil {
			t.Fatalf("host-local did not record %s: %v", ips[0], err)
		}
		if !strings.Contains(string(data), id) {
			t.Fatalf("host-local records %q for %s, want sandbox %s", data, ips[0], id)
		}
		deletePod(t, cri, id)
		if _, err := os.Stat(filepath.Join(n.hostLocalDir, n.net, ips[0])); !os.IsNotExist(err) {
			t.Fatal(fmt.Errorf("host-local still records %s after the sandbox was removed: %v", ips[0], err))
		}
	})
}

// TestHarnessCrashRestart proves Containerd.Crash and Restart: every sandbox
// process dies, the old sandboxes come back not ready and can be removed, and
// new ones run.
func TestHarnessCrashRestart(t *testing.T) {
	n := newNode(t, flannelConf, "host-local")
	ctd, cri := n.startContainerd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, _ := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "u1"})
	st, err := cri.PodStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ctd.Crash(t)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", st.PID)); err == nil {
		if data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.PID)); !strings.Contains(string(data), "zombie") {
			t.Fatalf("sandbox process %d survived the crash", st.PID)
		}
	}
	ctd.Restart(t)
	cri = ctd.CRI(t)
	pods, err := cri.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Id != id || pods[0].State == runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandboxes after the crash: %v; want %s not ready", pods, id)
	}
	if err := cri.DeletePod(ctx, id); err != nil {
		t.Fatalf("removing the dead sandbox: %v", err)
	}
	runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "u2"})
}
