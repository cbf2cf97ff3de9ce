//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
// StatefulSet on the two-node cluster (issue 32's disruption table,
// etcd_table_test.go).
const (
	etcdName     = "etcd" // the StatefulSet, its pods' app label and their container
	etcdReplicas = 3
	// etcdHostPath is where the members keep their data on the node (a
	// hostPath volume, one subdirectory per pod): each node binds its own
	// directory there, in its mount namespace.
	etcdHostPath = "/var/lib/etcd"
	// annPlacement asks the placement policy for a required (not only
	// preferred) node affinity (issue 32).
	annPlacement = "stickyip.io/placement"
)

// etcdMemberNames are the StatefulSet's pods, in order.
var etcdMemberNames = []string{"etcd-0", "etcd-1", "etcd-2"}

// etcdApp is the etcd StatefulSet of namespace ns on cluster c.
type etcdApp struct {
	c      *cluster
	ns     string
	client *etcdClient
	// sticky: the nodes run stickyip, checkpointd and deploy/placement
	// (else host-local alone: the control).
	sticky bool
	// bootstraps counts the clusters founded (each has its own
	// --initial-cluster-token).
	bootstraps int
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
// its data on the node (hostPath, a subdirectory per pod), its IP reserved
// for 10 minutes after its sandbox goes, placement required. The
// entrypoint waits for the join file the test writes (test/harness/etcdmember).
func etcdStatefulSet(ns string) *appsv1.StatefulSet {
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
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					annReservation: "10m",
					annPlacement:   "required",
				}},
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
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: field("metadata.name")}, {Name: "POD_IP", ValueFrom: field("status.podIP")}},
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
	eventually(t, fmt.Sprintf("%d etcd pods in %s running", etcdReplicas, a.ns), timeout, time.Second, func() (bool, string) {
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

// bootstrap creates the StatefulSet and founds the cluster by IP, as an
// operator adds members at runtime: once the three pods run (each
// entrypoint waiting), etcd-0 founds a one-member cluster at its pod IP;
// each other member is added by `member add` of its pod IP through
// etcd-0, then started with the --initial-cluster the add returned. It
// waits until the three members are listed at their pod IPs and healthy.
func (a *etcdApp) bootstrap() {
	t := a.c.t
	t.Helper()
	start := time.Now()
	a.bootstraps++
	token := fmt.Sprintf("%s-%d", a.ns, a.bootstraps)
	if _, err := a.c.client.AppsV1().StatefulSets(a.ns).Create(context.Background(), etcdStatefulSet(a.ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := a.waitPods(3 * time.Minute)
	founder := pods[etcdMemberNames[0]]
	a.writeJoin(founder, map[string]string{founder.Name: etcdPeerURL(founder.IP)}, "new", token)
	a.waitMembers(pods, 1)
	for i, name := range etcdMemberNames[1:] {
		p := pods[name]
		var members []etcdMember
		eventually(t, "member add "+name+" through "+founder.Name, time.Minute, time.Second, func() (bool, string) {
			var err error
			members, err = a.client.memberAdd(etcdClientURL(founder.IP), etcdPeerURL(p.IP))
			return err == nil, fmt.Sprint(err)
		})
		initial := map[string]string{name: etcdPeerURL(p.IP)}
		for _, m := range members {
			if m.Name != "" { // started: the new one has no name yet
				initial[m.Name] = m.PeerURLs[0]
			}
		}
		a.writeJoin(p, initial, "existing", token)
		a.waitMembers(pods, i+2)
	}
	var where []string
	for _, name := range etcdMemberNames {
		where = append(where, fmt.Sprintf("%s %s on %s", name, pods[name].IP, pods[name].Node))
	}
	t.Logf("etcd in %s founded by IP (token %s) in %s: %s", a.ns, token, time.Since(start).Round(100*time.Millisecond), strings.Join(where, ", "))
}

// writeJoin writes pod p's join file on its node (a rename, so the
// entrypoint never reads half of it): the initial cluster (name → peer
// URL), its state ("new" or "existing") and token.
func (a *etcdApp) writeJoin(p etcdPod, initial map[string]string, state, token string) {
	t := a.c.t
	t.Helper()
	var urls []string
	for name, u := range initial {
		urls = append(urls, name+"="+u)
	}
	sort.Strings(urls)
	text := fmt.Sprintf("--initial-cluster=%s\n--initial-cluster-state=%s\n--initial-cluster-token=%s\n", strings.Join(urls, ","), state, token)
	dir := filepath.Join(a.c.node(p.Node).etcdDir(), p.Name) // the pod's subPathExpr, made by the kubelet
	writeFile(t, filepath.Join(dir, "join.tmp"), []byte(text), 0o644)
	if err := os.Rename(filepath.Join(dir, "join.tmp"), filepath.Join(dir, "join")); err != nil {
		t.Fatal(err)
	}
}

// waitMembers waits until the first n of etcdMemberNames are listed with
// their pods' IPs (peer and client URLs) and each answers healthy.
func (a *etcdApp) waitMembers(pods map[string]etcdPod, n int) {
	t := a.c.t
	t.Helper()
	names := etcdMemberNames[:n]
	eventually(t, fmt.Sprintf("etcd members %v listed at their pod IPs and healthy", names), 2*time.Minute, time.Second, func() (bool, string) {
		members, err := a.client.memberList(etcdClientURL(pods[names[0]].IP))
		if err != nil {
			return false, err.Error()
		}
		if why := listedAt(members, pods, names); why != "" {
			return false, why
		}
		for _, name := range names {
			if err := a.client.health(etcdClientURL(pods[name].IP)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

// listedAt says how members differ from names listed each at its pod's IP
// (peer and client URL), "" when they do not.
func listedAt(members []etcdMember, pods map[string]etcdPod, names []string) string {
	if len(members) != len(names) {
		return fmt.Sprintf("%d members listed, want %d: %v", len(members), len(names), members)
	}
	for i, m := range members {
		ip := pods[names[i]].IP
		if m.Name != names[i] || !slices.Equal(m.PeerURLs, []string{etcdPeerURL(ip)}) || !slices.Equal(m.ClientURLs, []string{etcdClientURL(ip)}) {
			return fmt.Sprintf("member %s, want %s at %s", m, names[i], ip)
		}
	}
	return ""
}

// healthy reports whether the cluster is as bootstrap leaves it: three
// pods running, listed at their IPs, each endpoint healthy.
func (a *etcdApp) healthy() (bool, string) {
	pods, err := a.pods()
	if err != nil {
		return false, err.Error()
	}
	if !allRunning(pods) {
		return false, fmt.Sprint(pods)
	}
	members, err := a.client.memberList(etcdClientURL(pods[etcdMemberNames[0]].IP))
	if err != nil {
		return false, err.Error()
	}
	if why := listedAt(members, pods, etcdMemberNames); why != "" {
		return false, why
	}
	for _, name := range etcdMemberNames {
		if err := a.client.health(etcdClientURL(pods[name].IP)); err != nil {
			return false, err.Error()
		}
	}
	return true, ""
}

// ensure leaves a healthy cluster: the one running, or a new one when a
// disruption left it otherwise (the StatefulSet deleted, the members' data
// removed from the nodes and, with stickyip, their reservations released,
// so that the scheduler places the new members afresh; bootstrap again).
func (a *etcdApp) ensure() {
	t := a.c.t
	t.Helper()
	if ok, why := a.healthy(); ok {
		return
	} else if a.bootstraps > 0 {
		t.Logf("etcd not as founded (%s): a new cluster", why)
	}
	a.remove()
	a.bootstrap()
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
		return err == nil && len(l.Items) == 0, fmt.Sprint(err, l)
	})
	for _, n := range a.c.nodes {
		removeContents(t, n.etcdDir())
	}
	if a.sticky {
		a.release()
	}
}

// saveLogs copies the members' container logs (the kubelet's podLogsDir)
// into each node's log directory, etcd-pods/, as .txt (kept out of
// run-e2e.sh's tails of *.log).
func (a *etcdApp) saveLogs() {
	for _, n := range a.c.nodes {
		files, _ := filepath.Glob(filepath.Join(n.podLogsDir(), a.ns+"_"+etcdName+"-*", etcdName, "*.log"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			pod := filepath.Base(filepath.Dir(filepath.Dir(f)))
			dst := filepath.Join(n.logDir, "etcd-pods", pod+"_"+strings.TrimSuffix(filepath.Base(f), ".log")+".txt")
			if os.MkdirAll(filepath.Dir(dst), 0o755) == nil {
				_ = os.WriteFile(dst, b, 0o644)
			}
		}
	}
}
