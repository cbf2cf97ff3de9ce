//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestIdentityReplacementNoNeedlessWait (issue 19, "No needless wait"): a
// Deployment-style pod with stickyip.io/identity is replaced before the old
// one is gone. The replacement's ADD waits for the old sandbox's DEL instead
// of failing with error 11 (which the kubelet retried ~11 s later: 13–19 s
// from delete to Running), so it runs a few seconds after the delete, with
// the same IP.
func TestIdentityReplacementNoNeedlessWait(t *testing.T) {
	n := newNode(t, nodeOptions{ipam: "stickyip"})
	n.startControlPlane()
	n.startContainerd()
	n.startKubelet(true)

	sticky := map[string]string{annIdentity: "registry", annReservation: "5"}
	n.createPod(testPod("registry-a", sticky))
	ip := n.waitAPIPodRunning("registry-a", 3*time.Minute)

	// The replacement comes first (a rollout's surge pod, or a controller
	// that does not wait): its ADD finds the address held by a live sandbox.
	n.createPod(testPod("registry-b", sticky))
	time.Sleep(3 * time.Second)
	ctx := context.Background()
	if p, err := n.client.CoreV1().Pods("default").Get(ctx, "registry-b", metav1.GetOptions{}); err != nil || p.Status.PodIP != "" {
		t.Fatalf("replacement has IP %q (%v) while the old pod still runs", p.Status.PodIP, err)
	}

	deleted := time.Now()
	if err := n.client.CoreV1().Pods("default").Delete(ctx, "registry-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := deleted.Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		p, err := n.client.CoreV1().Pods("default").Get(ctx, "registry-b", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			got = p.Status.PodIP
			break
		}
	}
	took := time.Since(deleted)
	if got == "" {
		t.Fatalf("replacement not Running 60 s after the old pod's delete")
	}
	t.Logf("FIGURE identity replacement: delete of the old pod → replacement Running with %s: %v (old behaviour: error 11, kubelet retry, 13–19 s)", got, took.Round(10*time.Millisecond))
	if got != ip {
		t.Fatalf("replacement got %s, want the identity's %s", got, ip)
	}
	if took > 5*time.Second {
		t.Fatalf("replacement Running %v after the delete; want ≤ 5 s (well under the kubelet's ~11 s retry)", took)
	}
	n.waitAPIPodRunning("registry-b", 30*time.Second) // one ready sandbox, with that IP
}
