//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// workloads is the ground floor of the two-node cluster: what the
// controllers and the scheduler create runs through each node's own CNI
// chain (a step of TestCluster).
//
//  1. The API server serves the admission policy APIs (MutatingAdmissionPolicy
//     is GA in 1.36) with its default feature set.
//  2. A Deployment (2 replicas) and a StatefulSet (2 replicas, a reservation
//     annotation), created through the API, each with a required
//     anti-affinity: one pod per node, each Ready with an IP of its node's
//     flannel subnet that its node's runtime reports too, and the kubelet's
//     service-account token readable in the container.
//  3. Each kubelet's device-plugin socket is in its own node's directory.
//
// Its pods stay for the Node deletion (TestCluster's last step, nodeDeleted):
// the deleted Node's pods leave the API (pod GC) and a ConfigMap owned by the
// Node is garbage-collected; the other node's pods stay as they were.
func (c *cluster) workloads() *workloadsRun {
	t := c.t
	ctx := context.Background()
	cs := c.client

	// 1. Admission policy APIs.
	res, err := cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, r := range res.APIResources {
		served = append(served, r.Name)
	}
	for _, want := range []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
		"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
		if !slices.Contains(served, want) {
			t.Fatalf("admissionregistration.k8s.io/v1 does not serve %s (serves %v)", want, served)
		}
	}

	// 2. Workloads through the controllers and the scheduler.
	const ns = "apps"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(ns)
	two := int32(2)
	created := time.Now()
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: clusterPodTemplate("web", nil),
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &two,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template:            clusterPodTemplate("db", map[string]string{annReservation: "5"}),
			PodManagementPolicy: appsv1.ParallelPodManagement,
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &workloadsRun{ns: ns}
	w.web = c.waitPlaced(ns, "app=web", 2, 3*time.Minute)
	w.db = c.waitPlaced(ns, "app=db", 2, 3*time.Minute)
	t.Logf("Deployment web and StatefulSet db created → all 4 pods Ready on their nodes: %s", time.Since(created).Round(100*time.Millisecond))
	for _, n := range c.nodes {
		t.Logf("%s (subnet %s): %s %s, %s %s", n.name, n.subnet, w.web[n.name].Name, w.web[n.name].IP, w.db[n.name].Name, w.db[n.name].IP)
	}

	// 3. Each kubelet's device-plugin socket, in its node's own directory.
	for _, n := range c.nodes {
		sock := filepath.Join(n.dir, "device-plugins", "kubelet.sock")
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("%s's kubelet: no device-plugin socket at %s (bound on %s): %v", n.name, sock, devicePluginDir, err)
		}
	}
	return w
}

// workloadsRun is what the workloads step leaves for the Node deletion: its
// namespace and its pods by node name.
type workloadsRun struct {
	ns      string
	web, db map[string]placedPod
	owned   *corev1.ConfigMap // owned by the Node to be deleted (ownByNode)
}

// ownByNode creates a ConfigMap owned by Node gone, before its deletion.
func (w *workloadsRun) ownByNode(c *cluster, gone *node) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	no, err := c.client.CoreV1().Nodes().Get(ctx, gone.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.owned = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owned-by-" + gone.name, Namespace: w.ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: no.Name, UID: no.UID}}}}
	if _, err := c.client.CoreV1().ConfigMaps(w.ns).Create(ctx, w.owned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkNodeDeleted checks, after Node gone was deleted (at deleted), that
// its pods leave the API (pod GC) and the ConfigMap it owned is
// garbage-collected, and that the workloads' pods on node stay keep their
// UID, IP and readiness.
func (w *workloadsRun) checkNodeDeleted(c *cluster, gone, stay *node, deleted time.Time) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	cs := c.client
	var cmGone, podsGone time.Duration
	eventually(t, gone.name+"'s pods and owned ConfigMap gone", 3*time.Minute, time.Second, func() (bool, string) {
		if cmGone == 0 {
			if _, err := cs.CoreV1().ConfigMaps(w.ns).Get(ctx, w.owned.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				cmGone = time.Since(deleted)
			}
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + gone.name})
		if err != nil {
			return false, err.Error()
		}
		if podsGone == 0 && len(pods.Items) == 0 {
			podsGone = time.Since(deleted)
		}
		return cmGone != 0 && podsGone != 0, fmt.Sprintf("ConfigMap gone after %s, %d pods on %s", cmGone, len(pods.Items), gone.name)
	})
	t.Logf("Node %s deleted → owned ConfigMap garbage-collected %s, its pods gone from the API %s",
		gone.name, cmGone.Round(100*time.Millisecond), podsGone.Round(100*time.Millisecond))
	for app, before := range map[string]placedPod{"web": w.web[stay.name], "db": w.db[stay.name]} {
		p, err := cs.CoreV1().Pods(w.ns).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s pod %s on %s: %v", app, before.Name, stay.name, err)
		}
		if string(p.UID) != before.UID || p.Status.PodIP != before.IP || !podReady(p) {
			t.Fatalf("%s pod %s on %s changed: uid %s IP %s ready %v, was uid %s IP %s", app, p.Name, stay.name, p.UID, p.Status.PodIP, podReady(p), before.UID, before.IP)
		}
	}
}
