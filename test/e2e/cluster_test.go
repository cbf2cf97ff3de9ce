//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCluster runs the two-node scenarios of stickyip itself on one cluster
// with real flannel (newFlannelCluster: kube-flannel.yml applied with
// kubectl, flanneld leasing each Node's podCIDR), booted once, with no
// stickyip on the nodes yet. The scenarios are steps (subtests) in an order
// that makes each one's starting state true; a step whose needs did not
// pass is skipped, naming them. Each step removes the pods it made, but the
// workloads', which the last step needs.
//
//  1. kube-flannel: what kube-flannel.yml installed (kubeFlannelInstalled).
//  2. stickyip: the plugin and checkpointd put on the nodes by hand, the
//     documented switch, a pod per node from stickyip (stickyipNodes).
//  3. vxlan-then-host-gw: those pods ping each other across the nodes over
//     vxlan, then over host-gw (acrossBackends).
//  4. flanneld-api-away: flanneld started with the API server away exits
//     and writes nothing (flanneldWithoutAPI).
//  5. power-cut: node2 loses power while the API server is away and boots:
//     checkpointd's kept lease and restored pod, then flanneld's own lease
//     and the hand-back when the API server returns (powerCut).
//  6. etcd: issue 32's disruption table with stickyip, a 3-member etcd
//     that knows its members by pod IP (etcdSticky).
//  7. workloads: a Deployment and a StatefulSet through the scheduler and
//     the controllers (workloads).
//  8. placement: deploy/placement applied and stickyip-controller beside
//     the control plane: a StatefulSet pod and a keyed Deployment pod
//     deleted 10 times each come back to the node that holds their IP,
//     with a CPU-hungry pod there; every attack on the holder's record
//     refused first; the control without the hint's binding moves them;
//     the tie (the later pod wins); strict placement through a drain (the
//     scheduler's own FailedScheduling while cordoned); each node's record
//     writes per sticky pod lifecycle (placement).
//  9. retention: StatefulSet retention as stickyip-controller decides it
//     and the nodes apply it, judged by the addresses the members get back
//     and `stickyip list`: whenScaled Retain held past the pods' own
//     duration and back, whenScaled and whenDeleted Delete released within
//     seconds, the orphan cascade, re-creation within a second, a policy
//     edited after the scale-down, following off (the flag, the nodes'
//     grant removed); no node reads a StatefulSet (retention).
//  10. store-rebuild: node2's store overwritten, deleted, then overwritten
//     with the API server away; checkpointd rebuilds it each time, no pod
//     loses its address, no drain (storeRebuild).
//  11. reimage: node2 re-installed under the same name (its disk wiped of
//     stickyip, checkpointd, the CNI cache and the conflist) with its pods
//     deleted meanwhile: db-0 and a deleted pod's reservation back from the
//     node's own NodeRecord before any new pod gets an address; again with
//     the API server away at the node's start (reimage).
//  12. node-deleted: the node that ran the cache pod last goes and its Node
//     is deleted: its entries out of the index within seconds, its record
//     deleted by the controller, a pod required onto it named by
//     `checkpointd stranded`, one created after free; the workloads' last
//     checks (nodeDeleted).
//
// The install journey is TestClusterInstall, on a cluster of its own: it
// ends with stickyip uninstalled, so it shares nothing with these steps,
// and on its own boot it runs beside them (scripts/run-e2e.sh), which
// shortens the e2e tier by its length.
//
// One step alone: go test -tags e2e -run '^TestCluster$/^(kube-flannel|stickyip|placement)$'
// (a step's needs must be in the run).
func TestCluster(t *testing.T) {
	c, s := bootSteps(t)
	defer s.summary()

	s.run("kube-flannel", nil, c.kubeFlannelInstalled)
	var echo echoPods
	s.run("stickyip", []string{"kube-flannel"}, func() { echo = c.stickyipNodes() })
	s.run("vxlan-then-host-gw", []string{"stickyip"}, func() { c.acrossBackends(echo) })
	// The steps from here on need the ones before them that change the
	// whole cluster (the backend, the API server, a node's power) to have
	// passed, if they ran.
	s.run("flanneld-api-away", []string{"kube-flannel", "vxlan-then-host-gw?"}, func() { c.flanneldWithoutAPI(c.nodes[1]) })
	s.run("power-cut", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?"}, c.powerCut)
	s.run("etcd", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?", "power-cut?"}, c.etcdSticky)
	var w *workloadsRun
	s.run("workloads", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?", "power-cut?", "etcd?"}, func() { w = c.workloads() })
	var p *placementRun
	s.run("placement", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?", "power-cut?", "etcd?", "workloads?"}, func() { p = c.placement() })
	s.run("retention", []string{"placement"}, c.retention)
	s.run("store-rebuild", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?", "power-cut?", "etcd?", "workloads?", "placement?", "retention?"}, c.storeRebuild)
	s.run("reimage", []string{"stickyip", "vxlan-then-host-gw?", "flanneld-api-away?", "power-cut?", "etcd?", "workloads?", "placement?", "retention?", "store-rebuild?"}, func() {
		if !s.passed("workloads") {
			w = nil
		}
		c.reimage(w)
	})
	s.run("node-deleted", []string{"placement", "store-rebuild?", "reimage?"}, func() {
		if !s.passed("workloads") {
			w = nil
		}
		c.nodeDeleted(p, w)
	})
}

// bootSteps boots a real-flannel cluster with nothing of stickyip on it
// and prepares the steps a test runs on it.
func bootSteps(t *testing.T) (*cluster, *steps) {
	start := time.Now()
	c := newFlannelCluster(t, "installed")
	s := newSteps(t, c, start)
	s.booted = time.Since(start)
	return c, s
}

// TestClusterInstall is the install journey of docs/install.md on a
// two-node cluster with real flannel, booted with nothing of stickyip:
//
//  1. kube-flannel: what kube-flannel.yml installed (kubeFlannelInstalled).
//  2. install: deploy/install the way docs/install.md says: install, the
//     ConfigMap patch, an upgrade while pods start, the uninstall
//     (installJourney).
//  3. helm: the same with Helm on flannel installed by its own chart:
//     kube-flannel.yml replaced by flannel's chart, deploy/helm/stickyip
//     installed, flannel switched and upgraded with a changed value, the
//     switch undone and noticed, stickyip upgraded while pods start and
//     uninstalled (helmJourney).
//  4. etcd-host-local: issue 32's disruption table on the nodes the
//     uninstall leaves, on flannel's own conflist (host-local): the
//     control of TestCluster's etcd step (etcdControl).
func TestClusterInstall(t *testing.T) {
	c, s := bootSteps(t)
	defer s.summary()

	s.run("kube-flannel", nil, c.kubeFlannelInstalled)
	s.run("install", []string{"kube-flannel"}, c.installJourney)
	s.run("helm", []string{"install"}, c.helmJourney)
	s.run("etcd-host-local", []string{"install", "helm?"}, c.etcdControl)
}

// clusterNode is where a cluster node lives: its name and its address on
// the link between the nodes.
type clusterNode struct{ name, ip string }

// clusterNodes are the cluster's two nodes. The control plane runs on the
// first, serving on its address.
var clusterNodes = []clusterNode{
	{"node1", "172.30.0.1"},
	{"node2", "172.30.0.2"},
}

// clusterLinkPrefix is the prefix length of the link between the nodes.
const clusterLinkPrefix = "/24"

// devicePluginDir is the kubelet's device-plugin socket directory, a path
// fixed in every kubelet whatever its --root-dir: each cluster node binds its
// own directory there, in its own mount namespace.
const devicePluginDir = "/var/lib/kubelet/device-plugins"

// cluster is a control plane (etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager) and two nodes, each with its own network
// namespace, mount namespace, containerd, kubelet, kube-proxy, kube-flannel
// pod (flanneld and the flannel CNI plugin) and podCIDR, and checkpointd.
// The nodes' namespaces are joined by a veth pair ("eth0" in each,
// clusterNodes' addresses); the control plane runs in node1's and both
// kubelets reach it over that link; flannel routes the pod networks between
// the nodes.
type cluster struct {
	*controlPlane
	nodes []*node

	// flannelImages are the offline images kube-flannel.yml runs:
	// flannel's and the CNI plugin's.
	flannelImages []harness.OfflineImage
	// kubeFlannelShipped is kube-flannel's ConfigMap data as
	// kube-flannel.yml created it; kubeFlannelFile, the manifest applied.
	kubeFlannelShipped map[string]string
	kubeFlannelFile    string
	// installImages are the two image builds of the install step, which
	// the helm step installs again.
	installImages []image
}

// bootCluster creates and starts the cluster with the nodes' options
// (opts.flannel must be set: see newFlannelCluster): control plane first
// (the controller-manager allocates the Nodes' podCIDRs), then each node's
// containerd, kube-proxy and kubelet; kube-flannel.yml is applied
// (startKubeFlannel) and the nodes turn Ready through it; then each node's
// checkpointd (with the node's kubeconfig, configured as in TestCheckpointd;
// none with ipam "installed": deploy/install or the test brings it). Logs go
// to _output/e2e-logs/<test>/ (the control plane) and its node1/ and node2/
// subdirectories.
func bootCluster(t testing.TB, opts nodeOptions) *cluster {
	t.Helper()
	if !opts.flannel {
		t.Fatal("bootCluster: the cluster runs real flannel (newFlannelCluster)")
	}
	b := findBins(t)
	b.require(t, "kube-scheduler", "kube-controller-manager", "kube-proxy", "kubectl")
	for _, f := range []string{"flanneld", "install-conf"} {
		if _, err := os.Stat(filepath.Join(harness.FlannelBinDir(), f)); err != nil {
			missing(t, "%s missing (run scripts/build-flannel.sh, or make test-e2e)", filepath.Join(harness.FlannelBinDir(), f))
		}
	}
	start := time.Now()
	logDir := testLogDir(t)
	c := &cluster{}
	for _, cn := range clusterNodes {
		netns, h := newNetns(t, cn.name)
		// n.subnet is flanneld's lease, once written.
		n := &node{t: t, bins: b, opts: opts, name: cn.name, ip: cn.ip, dir: harness.ShortTempDir(t),
			logDir: filepath.Join(logDir, cn.name), ns: netns, nsHandle: h}
		if err := os.MkdirAll(n.logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	n1, n2 := c.nodes[0], c.nodes[1]
	run(t, "ip", "-n", n1.ns.Name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", n2.ns.Name)
	for _, n := range c.nodes {
		run(t, "ip", "-n", n.ns.Name, "addr", "add", n.ip+clusterLinkPrefix, "dev", "eth0")
		run(t, "ip", "-n", n.ns.Name, "link", "set", "eth0", "up")
	}
	var names []string
	for _, cn := range clusterNodes {
		names = append(names, cn.name)
	}
	c.controlPlane = newControlPlane(t, b, harness.ShortTempDir(t), logDir, n1.ns, n1.nsHandle, n1.ip, names...)
	c.clusterCIDR = podNetwork
	var images [2]harness.OfflineImage
	images[0], images[1] = harness.BuildFlannelImages(t, harness.ShortTempDir(t))
	c.flannelImages = images[:]
	for _, n := range c.nodes {
		n.controlPlane = c.controlPlane
		n.init()
		// After init: the node's /run tmpfs is then part of the namespace.
		n.mnt = harness.NewMountNS(t, map[string]string{devicePluginDir: filepath.Join(n.dir, "device-plugins")})
	}

	c.startControlPlane()
	c.startScheduler()
	c.startControllerManager()
	cpReady := time.Since(start)
	for _, n := range c.nodes {
		n.startContainerd()
		n.prepareFlannel(c.flannelImages)
		n.startKubelet(false)
	}
	c.startKubeFlannel()
	for _, n := range c.nodes {
		n.waitReady()
	}
	for _, n := range c.nodes {
		if opts.ipam != "installed" {
			n.startCheckpointd()
		}
	}
	t.Logf("cluster up in %s: control plane (etcd, kube-apiserver, scheduler, controller-manager) %s, then both nodes Ready through kube-flannel %s later",
		time.Since(start).Round(100*time.Millisecond), cpReady.Round(100*time.Millisecond), (time.Since(start) - cpReady).Round(100*time.Millisecond))
	return c
}

// node returns the cluster node named name.
func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s in the cluster", name)
	return nil
}

// clusterPodTemplate is a pod template of app app whose pods repel each
// other across nodes (required anti-affinity on the hostname), so that two
// replicas run one per node. The container reads the service-account token
// the kubelet mounts, and fails (restarting) unless it can.
func clusterPodTemplate(app string, annotations map[string]string) corev1.PodTemplateSpec {
	grace := int64(2)
	labels := map[string]string{"app": app}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					TopologyKey:   corev1.LabelHostname,
				}},
			}},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           harness.PauseImage,
				Command:         []string{"/pause"},
				Args:            []string{"-read", "/var/run/secrets/kubernetes.io/serviceaccount/token"},
				ImagePullPolicy: corev1.PullNever,
			}},
		},
	}
}

// placedPod is a pod of a workload as the API and its node's runtime agree
// on it.
type placedPod struct {
	Name, Node, IP string
	UID            string
}

// waitPlaced waits until the pods of namespace ns matching selector are
// exactly want, each Ready without a container restart, one per node, with
// an IP of its node's subnet that its node's runtime reports for the one
// ready sandbox of the pod; it returns them by node name.
func (c *cluster) waitPlaced(ns, selector string, want int, timeout time.Duration) map[string]placedPod {
	t := c.t
	t.Helper()
	ctx := context.Background()
	var out map[string]placedPod
	eventually(t, fmt.Sprintf("%d pods %s in %s Ready, one per node", want, selector, ns), timeout, time.Second, func() (bool, string) {
		pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != want {
			return false, fmt.Sprintf("%d pods", len(pods.Items))
		}
		got := map[string]placedPod{}
		for _, p := range pods.Items {
			pp, ok, why := c.placed(ctx, &p)
			if !ok {
				return false, why
			}
			if _, dup := got[pp.Node]; dup {
				t.Fatalf("pods %s and %s both on %s", got[pp.Node].Name, p.Name, pp.Node)
			}
			got[pp.Node] = pp
		}
		out = got
		return true, ""
	})
	return out
}

// placed reports whether pod p runs on its node as the API and the node's
// runtime agree: not terminating, Ready without a container restart (a
// restart fails the test), with an IP of its node's subnet (else the test
// fails) that the runtime reports for the pod's one ready sandbox. When not,
// it says why.
func (c *cluster) placed(ctx context.Context, p *corev1.Pod) (placedPod, bool, string) {
	t := c.t
	if p.DeletionTimestamp != nil || !podReady(p) || p.Spec.NodeName == "" {
		return placedPod{}, false, fmt.Sprintf("pod %s on %q: phase %s, conditions %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Fatalf("pod %s/%s: container %s restarted %d times (see its node's logs): %+v", p.Namespace, p.Name, cs.Name, cs.RestartCount, cs.LastTerminationState)
		}
	}
	n := c.node(p.Spec.NodeName)
	if !n.inSubnet(p.Status.PodIP) {
		t.Fatalf("pod %s/%s on %s has IP %s, not a pod address of the node's subnet %s", p.Namespace, p.Name, n.name, p.Status.PodIP, n.subnet)
	}
	sbs, err := n.readySandboxesWhere(ctx, func(sb *runtimeapi.PodSandbox) bool { return sb.GetMetadata().GetUid() == string(p.UID) })
	if err != nil {
		return placedPod{}, false, err.Error()
	}
	if len(sbs) != 1 || sbs[0].IP != p.Status.PodIP {
		return placedPod{}, false, fmt.Sprintf("pod %s: API uid %s IP %s; %s's runtime: %+v", p.Name, p.UID, p.Status.PodIP, n.name, sbs)
	}
	return placedPod{Name: p.Name, Node: n.name, IP: p.Status.PodIP, UID: string(p.UID)}, true, ""
}

// podReady reports whether the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
