//go:build e2e

package e2e

import (
	"os"
	"testing"
	"time"
)

// TestAPIPodThroughCNIChain is the ground floor of the e2e: a pod created
// through a real kube-apiserver runs on a real kubelet through containerd and
// the flannel → bridge → IPAM chain, and the API and the runtime agree on its
// IP, taken from the node's flannel subnet. The IPAM is stickyip once
// `make build` has built it (E2E_IPAM=host-local forces the upstream one).
func TestAPIPodThroughCNIChain(t *testing.T) {
	ipam := "stickyip"
	if v := os.Getenv("E2E_IPAM"); v != "" {
		ipam = v
	} else if _, err := os.Stat("../../bin/stickyip"); err != nil {
		ipam = "host-local"
	}
	t.Logf("IPAM: %s", ipam)
	n := newNode(t, nodeOptions{ipam: ipam})
	n.startControlPlane()
	n.startContainerd()
	n.startKubelet(true)

	n.createPod(testPod("web", nil))
	ip := n.waitAPIPodRunning("web", 3*time.Minute)
	if !n.inSubnet(ip) {
		t.Fatalf("pod IP %s is not a pod address of the node subnet %s", ip, nodeSubnet)
	}
	t.Logf("pod default/web runs with IP %s", ip)

	// A second pod gets another address of the same subnet.
	n.createPod(testPod("web2", nil))
	ip2 := n.waitAPIPodRunning("web2", 2*time.Minute)
	if !n.inSubnet(ip2) || ip2 == ip {
		t.Fatalf("second pod IP %s: want another pod address of %s than %s", ip2, nodeSubnet, ip)
	}
}

// TestAPIPodRecreatedKeepsIP: through the real kubelet, a pod with
// io.kubernetes.cri/reserved-ip-duration that is deleted and created again
// with the same name gets its IP back, and a pod created in between does
// not get it.
func TestAPIPodRecreatedKeepsIP(t *testing.T) {
	n := newNode(t, nodeOptions{ipam: "stickyip"})
	n.startControlPlane()
	n.startContainerd()
	n.startKubelet(true)

	reserved := map[string]string{annReservation: "5"} // minutes
	n.createPod(testPod("db", reserved))
	ip := n.waitAPIPodRunning("db", 3*time.Minute)

	n.deletePodGracefully("db", 2*time.Minute)
	n.createPod(testPod("filler", nil))
	if other := n.waitAPIPodRunning("filler", 2*time.Minute); other == ip {
		t.Fatalf("pod filler got %s, reserved for default/db", other)
	}
	n.createPod(testPod("db", reserved))
	if again := n.waitAPIPodRunning("db", 2*time.Minute); again != ip {
		t.Fatalf("re-created pod db got %s, want its reserved IP %s", again, ip)
	}
	t.Logf("pod default/db re-created through the API kept %s", ip)
}
