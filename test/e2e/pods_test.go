//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPod is a pod bound to the node (no scheduler runs) whose one container
// is the harness's pause binary, with no service account token.
func testPod(name string, annotations map[string]string) *corev1.Pod {
	no := false
	grace := int64(2)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           harness.PauseImage,
				Command:         []string{"/pause"},
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// createPod creates pod through the API.
func (n *node) createPod(pod *corev1.Pod) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		n.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

// waitAPIPodRunning waits until the API reports the pod Running with an IP
// and the runtime runs exactly one ready sandbox for it, with that IP; it
// returns the IP.
func (n *node) waitAPIPodRunning(name string, timeout time.Duration) string {
	n.t.Helper()
	return n.waitPodRunningIn("default", name, timeout)
}

// waitPodRunningIn is waitAPIPodRunning for a pod of namespace ns.
func (n *node) waitPodRunningIn(ns, name string, timeout time.Duration) string {
	n.t.Helper()
	ctx := context.Background()
	var ip string
	eventually(n.t, "pod "+ns+"/"+name+" Running", timeout, time.Second, func() (bool, string) {
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return false, fmt.Sprintf("phase %s, podIP %q, conditions %v", p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
		}
		sbs, err := n.readySandboxes(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 1 || sbs[0].UID != string(p.UID) || sbs[0].IP != p.Status.PodIP {
			return false, fmt.Sprintf("API pod uid %s IP %s; runtime sandboxes %+v", p.UID, p.Status.PodIP, sbs)
		}
		ip = p.Status.PodIP
		return true, ""
	})
	return ip
}

// deletePodNow deletes a pod through the API without waiting for a kubelet.
func (n *node) deletePodNow(name string) { n.t.Helper(); n.deletePodNowIn("default", name) }

// deletePodNowIn is deletePodNow for a pod of namespace ns.
func (n *node) deletePodNowIn(ns, name string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	err := n.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		n.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// inSubnet reports whether ip is a pod address of the node's current
// flannel subnet (not its network or gateway address).
func (n *node) inSubnet(ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	pfx := netip.MustParsePrefix(n.subnet)
	return pfx.Masked().Contains(a) && a != pfx.Addr() && a != pfx.Masked().Addr()
}

// deletePodGracefully deletes a pod through the API and waits until the
// kubelet has stopped it (the API object is gone) and the runtime has no ready
// sandbox for it.
func (n *node) deletePodGracefully(name string, timeout time.Duration) {
	n.t.Helper()
	n.deletePodGracefullyIn("default", name, timeout)
}

// deletePodGracefullyIn is deletePodGracefully for a pod of namespace ns.
func (n *node) deletePodGracefullyIn(ns, name string, timeout time.Duration) {
	n.t.Helper()
	ctx := context.Background()
	if err := n.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	eventually(n.t, "pod "+ns+"/"+name+" deleted", timeout, time.Second, func() (bool, string) {
		_, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("API: %v", err)
		}
		sbs, err := n.readySandboxes(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		return len(sbs) == 0, fmt.Sprintf("ready sandboxes: %+v", sbs)
	})
}
