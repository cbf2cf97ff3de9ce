//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stickyip/stickyip/test/harness"
)

// An etcd cluster whose members know each other by pod IP, run as a
// StatefulSet on the two-node cluster (the disruption table's
// etcd_table_test.go).
const (
	etcdName     = "etcd" // the StatefulSet, its pods' app label and their container
	etcdReplicas = 3
	// etcdHostPath is where the members keep their data on the node (a
	// hostPath volume, one subdirectory per pod): each node binds its own
	// directory there, in its mount namespace.
	etcdHostPath = "/var/lib/etcd"
)

// etcdMemberNames are the StatefulSet's pods, in order.
var etcdMemberNames = []string{"etcd-0", "etcd-1", "etcd-2"}

// etcdApp is the etcd StatefulSet of namespace ns on cluster c.
type etcdApp struct {
	c      *cluster
	ns     string
	client *etcdClient
	// sticky: the nodes run stickyip, checkpointd and deploy/placement
	// and the members keep their IPs (else: host-local, the control, or
	// stickyip in a namespace without the opt-in).
	sticky bool
	// annotations are the pod template's: none (the members keep their IPs
	// through their namespace's opt-in, stickyip.io/statefulsets), or
	// stickyip's own.
	annotations map[string]string
	// foundings counts the clusters founded; token is the current one's
	// --initial-cluster-token.
	foundings int
	token     string
}

// newEtcdApp readies cluster c for etcd members in namespace ns: the
// offline etcd image (harness.BuildEtcdImage) imported into each node's
// containerd, each node's own directory bound on etcdHostPath, the
// namespace. The test talks to the members from node1's network namespace.
func (c *cluster) newEtcdApp(ns string, sticky bool) *etcdApp {
	t := c.t
	t.Helper()
	img := harness.BuildEtcdImage(t, harness.ShortTempDir(t), filepath.Join(c.bins.k8s, "etcd"))
	harness.HostMountPoint(t, etcdHostPath, false)
	for _, n := range c.nodes {
		if out, err := n.ctd.Ctr("images", "import", img.Archive); err != nil {
			t.Fatalf("%s: ctr images import %s: %v\n%s", n.name, img.Archive, err, out)
		}
		if err := os.MkdirAll(n.etcdDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		n.mnt.Bind(t, etcdHostPath, n.etcdDir())
	}
	c.ensureNamespace(ns)
	return &etcdApp{c: c, ns: ns, sticky: sticky, client: newEtcdClient(c.nodes[0].nsHandle)}
}

// etcdDir is the node's directory bound on etcdHostPath.
func (n *node) etcdDir() string { return filepath.Join(n.dir, "etcd") }

// etcdStatefulSet is the etcd StatefulSet: three members, each advertising
// its pod IP to its peers and clients ($(POD_IP), from the downward API),
// its data on the node (hostPath, a subdirectory per pod), annotations
// (none: the manifest of a third-party chart, which the namespace's opt-in
// makes sticky) on its pod template. The entrypoint waits for the join
// file the test writes (test/harness/etcdmember).
func etcdStatefulSet(ns string, annotations map[string]string) *appsv1.StatefulSet {
	labels := map[string]string{"app": etcdName}
	replicas := int32(etcdReplicas)
	grace := int64(10)
	no := false
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: etcdName, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			ServiceName:         etcdName,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &no,
					Containers: []corev1.Container{{
						Name:            etcdName,
						Image:           harness.EtcdImage,
						ImagePullPolicy: corev1.PullNever,
						Command: []string{harness.EtcdImageEntrypoint, "-data-dir=/var/lib/etcd/data", "-join=/var/lib/etcd/join",
							"--", harness.EtcdImageBinary},
						Args: []string{"--name=$(POD_NAME)",
							"--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
							"--initial-advertise-peer-urls=http://$(POD_IP):2380", "--advertise-client-urls=http://$(POD_IP):2379"},
						Env:   []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: field("metadata.name")}, {Name: "POD_IP", ValueFrom: field("status.podIP")}},
						Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}, {Name: "peer", ContainerPort: 2380}},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("100m")}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(2379)}},
							PeriodSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 2,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd", SubPathExpr: "$(POD_NAME)"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: etcdHostPath, Type: &dirOrCreate}}}},
				},
			},
		},
	}
}

// etcdPod is a member's pod as the API shows it.
type etcdPod struct {
	Name, Node, IP, UID string
	Container           string // the etcd container's ID: a new one after a restart
	Running, Ready      bool
	Placement           string // the node term the placement policy gave it (placementTerm)
}

// pods returns the StatefulSet's pods that are not terminating, by name.
func (a *etcdApp) pods() (map[string]etcdPod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.c.client.CoreV1().Pods(a.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + etcdName})
	if err != nil {
		return nil, err
	}
	out := map[string]etcdPod{}
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		ep := etcdPod{Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, UID: string(p.UID),
			Running: p.Status.Phase == corev1.PodRunning, Ready: podReady(p), Placement: placementTerm(p)}
		for _, cs := range p.Status.ContainerStatuses {
			ep.Container = cs.ContainerID
			ep.Running = ep.Running && cs.State.Running != nil
		}
		out[p.Name] = ep
	}
	return out, nil
}

// placementTerm names the node affinity term the placement policy added
// to pod p: "required <node>" (a required term naming one node, by name
// or hostname label), else "preferred <node>" (a weight-100 preferred term
// naming one node), else "none".
func placementTerm(p *corev1.Pod) string {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil {
		return "none"
	}
	na := p.Spec.Affinity.NodeAffinity
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		for _, term := range req.NodeSelectorTerms {
			if node := oneNode(term); node != "" {
				return "required " + node
			}
		}
	}
	for _, term := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		if node := oneNode(term.Preference); term.Weight == placementWeight && node != "" {
			return "preferred " + node
		}
	}
	return "none"
}

// oneNode is the node a selector term names alone (metadata.name or the
// hostname label In one value), or "".
func oneNode(term corev1.NodeSelectorTerm) string {
	for _, r := range append(slices.Clone(term.MatchFields), term.MatchExpressions...) {
		if (r.Key == "metadata.name" || r.Key == corev1.LabelHostname) && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			return r.Values[0]
		}
	}
	return ""
}

// waitPods waits until the StatefulSet's etcdReplicas pods run (their
// container started, with an IP) and returns them.
func (a *etcdApp) waitPods(timeout time.Duration) map[string]etcdPod {
	t := a.c.t
	t.Helper()
	var pods map[string]etcdPod
	eventually(t, fmt.Sprintf("%d etcd pods in %s running", etcdReplicas, a.ns), timeout, 500*time.Millisecond, func() (bool, string) {
		var err error
		if pods, err = a.pods(); err != nil {
			return false, err.Error()
		}
		return allRunning(pods), fmt.Sprint(pods)
	})
	return pods
}

// allRunning reports whether pods are the StatefulSet's etcdReplicas pods,
// each running with an IP.
func allRunning(pods map[string]etcdPod) bool {
	if len(pods) != etcdReplicas {
		return false
	}
	for _, p := range pods {
		if !p.Running || p.IP == "" {
			return false
		}
	}
	return true
}

// remove deletes the StatefulSet and its pods, the members' data and,
// with stickyip, their reservations (`stickyip release` on each node, as
// an operator frees them) and so their entries in the placement index.
func (a *etcdApp) remove() {
	t := a.c.t
	t.Helper()
	a.c.kubectl("delete", "-n", a.ns, "statefulset", etcdName, "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=2m")
	eventually(t, "etcd pods gone", 2*time.Minute, time.Second, func() (bool, string) {
		l, err := a.c.client.CoreV1().Pods(a.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + etcdName})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d pods", len(l.Items))
	})
	for _, n := range a.c.nodes {
		removeContents(t, n.etcdDir())
	}
	if a.sticky {
		a.release()
	}
}

// saveLogs copies the members' container logs (the kubelet's podLogsDir,
// gone with their pods) into each node's log directory, etcd-pods/, as
// .txt (kept out of run-e2e.sh's tails of *.log); a log it cannot copy is
// said.
func (a *etcdApp) saveLogs() {
	for _, n := range a.c.nodes {
		files, _ := filepath.Glob(filepath.Join(n.podLogsDir(), a.ns+"_"+etcdName+"-*", etcdName, "*.log"))
		for _, f := range files {
			pod := filepath.Base(filepath.Dir(filepath.Dir(f)))
			dst := filepath.Join(n.logDir, "etcd-pods", pod+"_"+strings.TrimSuffix(filepath.Base(f), ".log")+".txt")
			b, err := os.ReadFile(f)
			if err == nil {
				err = os.MkdirAll(filepath.Dir(dst), 0o755)
			}
			if err == nil {
				err = os.WriteFile(dst, b, 0o644)
			}
			if err != nil {
				a.c.t.Logf("etcd logs: %s: %v", f, err)
			}
		}
	}
}
