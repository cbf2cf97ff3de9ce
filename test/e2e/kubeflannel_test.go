//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Real flannel on the two-node cluster: kube-flannel.yml from the pinned
// flannel module, applied with kubectl, with only its images replaced by
// the offline ones (harness.BuildFlannelImages).
const (
	flannelNamespace     = "kube-flannel"
	flannelConfigMap     = "kube-flannel-cfg"
	kubeFlannelDaemonSet = "kube-flannel-ds"
	kubeFlannelSelector  = "app=flannel"
	// flannelModule is the module whose Documentation/kube-flannel.yml is
	// applied, at the version test/e2e/k8sbuild/flannel pins.
	flannelModule = "github.com/flannel-io/flannel"
	// The flannel annotations flanneld puts on its Node.
	annFlannelBackend  = "flannel.alpha.coreos.com/backend-type"
	annFlannelPublicIP = "flannel.alpha.coreos.com/public-ip"
)

// kubeFlannelImages are the images kube-flannel.yml names and the offline
// images that replace them.
var kubeFlannelImages = map[string]string{
	"ghcr.io/flannel-io/flannel:" + harness.FlannelVersion:  harness.FlannelImage,
	"ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3": harness.FlannelCNIPluginImage,
}

// newFlannelCluster boots the two-node cluster (bootCluster) with real
// flannel, as users install it: kube-controller-manager allocates each
// Node's podCIDR from 10.244.0.0/16, each node runs kube-proxy (flanneld
// reaches the API server through the "kubernetes" Service), and
// kube-flannel.yml (vxlan, its shipped ConfigMap: flannel → bridge →
// host-local) is applied; the nodes are Ready once its pods have installed
// the CNI plugin and config, and each node's subnet is flanneld's lease.
// With ipam "stickyip" the nodes' CNI bin dir also holds stickyip and each
// node runs checkpointd (c.useStickyip switches the conflist to stickyip as
// docs/install.md says); with "installed" neither (the test brings them).
func newFlannelCluster(t testing.TB, ipam string) *cluster {
	t.Helper()
	return bootCluster(t, nodeOptions{ipam: ipam, flannel: true})
}

// prepareFlannel readies a node for kube-flannel's pods, once its
// containerd runs and before its kubelet starts: a default route on eth0
// (flanneld uses the default route's interface; ClusterIPs need a route;
// nothing off the link answers), the host paths of the manifest bound to
// the node's own (bindNodePaths, plus /run/xtables.lock and /var/log, where
// the patched conflist's stickyip logs), the offline images imported, and
// kube-proxy started.
func (n *node) prepareFlannel(images []harness.OfflineImage) {
	t := n.t
	t.Helper()
	run(t, "ip", "-n", n.ns.Name, "route", "add", "default", "dev", "eth0")
	n.bindNodePaths()
	lock := filepath.Join(n.dir, "xtables.lock")
	writeFile(t, lock, nil, 0o600)
	harness.HostMountPoint(t, "/run/xtables.lock", true)
	n.mnt.Bind(t, "/run/xtables.lock", lock)
	varLog := filepath.Join(n.logDir, "var-log")
	if err := os.MkdirAll(varLog, 0o755); err != nil {
		t.Fatal(err)
	}
	n.mnt.Bind(t, "/var/log", varLog)
	for _, img := range images {
		if out, err := n.ctd.Ctr("images", "import", img.Archive); err != nil {
			t.Fatalf("%s: ctr images import %s: %v\n%s", n.name, img.Archive, err, out)
		}
	}
	n.startKubeProxy()
}

// startKubeProxy starts the node's kube-proxy (iptables mode, as
// system:kube-proxy) in its namespaces; it serves the "kubernetes" Service
// that in-cluster clients such as flanneld dial. Conntrack sizing is left
// alone (a node's network namespace cannot set it).
func (n *node) startKubeProxy() {
	t := n.t
	t.Helper()
	kc := filepath.Join(n.dir, "kube-proxy.kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		n.writeKubeconfig(kc, kubeProxyUser)
	}
	n.kubeProxy = n.start("kube-proxy", nil, filepath.Join(n.bins.k8s, "kube-proxy"),
		"--kubeconfig="+kc, "--hostname-override="+n.name,
		"--proxy-mode=iptables", "--cluster-cidr="+podNetwork,
		"--conntrack-max-per-core=0",
		"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249",
		"--v=1")
}

// startKubeFlannel checks that both nodes registered NotReady for want of
// a network, applies kube-flannel.yml (images replaced) with kubectl, waits
// for its rollout, then for each node's lease (n.subnet).
func (c *cluster) startKubeFlannel() {
	t := c.t
	t.Helper()
	for _, n := range c.nodes {
		t.Logf("%s before kube-flannel: %s", n.name, n.waitNetworkNotReady())
	}
	start := time.Now()
	manifest := kubeFlannelManifest(t, harness.ShortTempDir(t))
	c.kubeFlannelFile = manifest
	t.Logf("kubectl apply -f kube-flannel.yml (%s@%s, images replaced):\n%s", flannelModule, harness.FlannelVersion, c.kubectl("apply", "-f", manifest))
	c.kubeFlannelShipped = c.kubeFlannelConfig()
	c.waitFlannelRollout()
	for _, n := range c.nodes {
		l := n.waitLease(time.Minute)
		n.subnet = l.Subnet.String()
	}
	t.Logf("kube-flannel: kubectl apply → rolled out and both leases written in %s (%s %s, %s %s)", time.Since(start).Round(100*time.Millisecond),
		c.nodes[0].name, c.nodes[0].subnet, c.nodes[1].name, c.nodes[1].subnet)
}

// waitNetworkNotReady waits until the node has registered and reports
// Ready=False because the runtime's network is not ready (no CNI config
// yet), and returns the condition's message.
func (n *node) waitNetworkNotReady() string {
	t := n.t
	t.Helper()
	var msg string
	eventually(t, n.name+" registered, NotReady for want of a network", 2*time.Minute, time.Second, func() (bool, string) {
		if err := n.kubelet.exited(); err != nil {
			t.Fatal(err)
		}
		no, err := n.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range no.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					t.Fatalf("%s is Ready before any CNI config was installed", n.name)
				}
				msg = cond.Reason + ": " + cond.Message
				return strings.Contains(cond.Message, "NetworkReady=false"), msg
			}
		}
		return false, "no Ready condition"
	})
	return msg
}

// waitFlannelRollout waits until kube-flannel's DaemonSet has rolled out
// (kubectl rollout status) with one available pod per node.
func (c *cluster) waitFlannelRollout() {
	c.t.Helper()
	c.kubectl("-n", flannelNamespace, "rollout", "status", "daemonset/"+kubeFlannelDaemonSet, "--timeout=3m")
	for _, n := range c.nodes {
		c.flannelPod(n)
	}
}

// flannelPod returns kube-flannel's running pod on node n.
func (c *cluster) flannelPod(n *node) *corev1.Pod {
	t := c.t
	t.Helper()
	pods, err := c.client.CoreV1().Pods(flannelNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: kubeFlannelSelector, FieldSelector: "spec.nodeName=" + n.name})
	if err != nil {
		t.Fatal(err)
	}
	var running []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	if len(running) != 1 {
		t.Fatalf("%s: %d running kube-flannel pods (of %d)", n.name, len(running), len(pods.Items))
	}
	return running[0]
}

// kubeFlannelManifest writes kube-flannel.yml from the pinned flannel
// module into dir with only its image references replaced by the offline
// images, and returns its path.
func kubeFlannelManifest(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(flannelModuleDir(t), "Documentation", "kube-flannel.yml"))
	if err != nil {
		t.Fatal(err)
	}
	image := regexp.MustCompile(`(?m)^(\s*image:\s*)(\S+)\s*$`)
	replaced := 0
	out := image.ReplaceAllStringFunc(string(b), func(line string) string {
		m := image.FindStringSubmatch(line)
		to, ok := kubeFlannelImages[m[2]]
		if !ok {
			t.Fatalf("kube-flannel.yml names image %s, which no offline image replaces", m[2])
		}
		replaced++
		return m[1] + to
	})
	if replaced == 0 {
		t.Fatal("kube-flannel.yml names no image")
	}
	p := filepath.Join(dir, "kube-flannel.yml")
	writeFile(t, p, []byte(out), 0o644)
	return p
}

// flannelModuleDir is the pinned flannel module's directory in the module
// cache (scripts/build-flannel.sh downloaded it).
func flannelModuleDir(t testing.TB) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", flannelModule)
	cmd.Dir = filepath.Join(root, "test", "e2e", "k8sbuild", "flannel")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		missing(t, "flannel module not in the module cache (run scripts/build-flannel.sh): %v", err)
	}
	return dir
}

// flannelLease is a node's subnet.env as flanneld wrote it.
type flannelLease struct {
	contract.FlannelLease
	MTU    string // FLANNEL_MTU
	IPMasq string // FLANNEL_IPMASQ
	raw    string
}

// lease reads the node's subnet.env (the file flanneld writes in the
// node's /run/flannel).
func (n *node) lease() (flannelLease, error) {
	b, err := os.ReadFile(n.subnetFile())
	if err != nil {
		return flannelLease{}, err
	}
	l, err := contract.ParseFlannelLease(b)
	if err != nil {
		return flannelLease{}, err
	}
	fl := flannelLease{FlannelLease: l, raw: string(b)}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "FLANNEL_MTU":
			fl.MTU = v
		case "FLANNEL_IPMASQ":
			fl.IPMasq = v
		}
	}
	return fl, nil
}

// podCIDR is the node's spec.podCIDR (kube-controller-manager's allocation).
func (n *node) podCIDR() (netip.Prefix, error) {
	no, err := n.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		return netip.Prefix{}, err
	}
	if no.Spec.PodCIDR == "" {
		return netip.Prefix{}, fmt.Errorf("node %s has no podCIDR", n.name)
	}
	return netip.ParsePrefix(no.Spec.PodCIDR)
}

// waitLease waits until flanneld has written the node's subnet.env with
// the Node's podCIDR (FLANNEL_SUBNET is its first address, the bridge's
// gateway) inside FLANNEL_NETWORK 10.244.0.0/16, and returns it.
func (n *node) waitLease(timeout time.Duration) flannelLease {
	t := n.t
	t.Helper()
	var l flannelLease
	eventually(t, n.name+": flanneld's subnet.env with the Node's podCIDR", timeout, time.Second, func() (bool, string) {
		cidr, err := n.podCIDR()
		if err != nil {
			return false, err.Error()
		}
		l, err = n.lease()
		if errors.Is(err, fs.ErrNotExist) {
			return false, "no subnet.env yet"
		}
		if err != nil {
			t.Fatalf("%s: subnet.env: %v", n.name, err)
		}
		want := netip.PrefixFrom(cidr.Addr().Next(), cidr.Bits())
		if l.Subnet != want || l.Network.String() != podNetwork {
			return false, fmt.Sprintf("podCIDR %s; subnet.env:\n%s", cidr, l.raw)
		}
		return true, ""
	})
	return l
}

// conflist reads the node's installed CNI config
// (/etc/cni/net.d/10-flannel.conflist, as kube-flannel's install-cni
// container copies it).
func (n *node) conflist() (string, error) {
	b, err := os.ReadFile(filepath.Join(n.cniConfDir(), "10-flannel.conflist"))
	return string(b), err
}

// kubeFlannelConfig returns kube-flannel's ConfigMap data.
func (c *cluster) kubeFlannelConfig() map[string]string {
	c.t.Helper()
	cm, err := c.client.CoreV1().ConfigMaps(flannelNamespace).Get(context.Background(), flannelConfigMap, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return cm.Data
}

// waitConflists waits until every node's installed conflist is want.
func (c *cluster) waitConflists(want string, timeout time.Duration) {
	c.t.Helper()
	for _, n := range c.nodes {
		eventually(c.t, n.name+": conflist copied from kube-flannel's ConfigMap", timeout, time.Second, func() (bool, string) {
			got, err := n.conflist()
			return err == nil && got == want, fmt.Sprintf("%v\n%s", err, got)
		})
	}
}

// restartKubeFlannel restarts kube-flannel's pods the documented way
// (kubectl rollout restart) and waits for the rollout.
func (c *cluster) restartKubeFlannel() {
	c.t.Helper()
	c.kubectl("-n", flannelNamespace, "rollout", "restart", "daemonset/"+kubeFlannelDaemonSet)
	c.waitFlannelRollout()
}

// useStickyip switches the nodes' conflist to stickyip as docs/install.md
// says: kube-flannel's ConfigMap patched with
// deploy/kube-flannel/cni-conf-patch.yaml, the DaemonSet restarted; it
// returns once every node runs the patched conflist.
func (c *cluster) useStickyip() {
	t := c.t
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	netConf := c.kubeFlannelConfig()["net-conf.json"]
	t.Logf("kubectl patch of kube-flannel's ConfigMap: %s", c.kubectl("-n", flannelNamespace, "patch", "configmap", flannelConfigMap,
		"--patch-file", filepath.Join(root, "deploy", "kube-flannel", "cni-conf-patch.yaml")))
	c.restartKubeFlannel()
	cfg := c.kubeFlannelConfig()
	if cfg["net-conf.json"] != netConf {
		t.Fatalf("%s/%s net-conf.json changed by the patch:\n%s\nwas:\n%s", flannelNamespace, flannelConfigMap, cfg["net-conf.json"], netConf)
	}
	conf := cfg["cni-conf.json"]
	if !strings.Contains(conf, `"type": "stickyip"`) {
		t.Fatalf("kube-flannel's cni-conf.json after the patch names no stickyip:\n%s", conf)
	}
	c.waitConflists(conf, time.Minute)
}

// offlineFlannelConf is kube-flannel.yml's own cni-conf.json (as applied at
// boot) with only its cniVersion changed from 1.0.0 to 0.3.1: the flannel
// CNI plugin built offline (plugins/meta/flannel v0.9.1) supports up to
// 0.4.0 and refuses 1.0.0 on ADD and DEL ("incompatible CNI versions");
// the flannel-io/cni-plugin that kube-flannel's image holds, and users run,
// is refused by the module proxy. kube-flannel.yml shipped 0.3.1 itself
// before v0.22.
func (c *cluster) offlineFlannelConf() string {
	t := c.t
	t.Helper()
	shipped := c.kubeFlannelShipped["cni-conf.json"]
	const from, to = `"cniVersion": "1.0.0"`, `"cniVersion": "0.3.1"`
	if strings.Count(shipped, from) != 1 {
		t.Fatalf("kube-flannel.yml's cni-conf.json does not name %s once (a new kube-flannel.yml: check what the offline flannel plugin accepts):\n%s", from, shipped)
	}
	return strings.Replace(shipped, from, to, 1)
}

// useFlannelIPAM switches the nodes' conflist back from stickyip as
// docs/install.md's uninstall says: kube-flannel's original cni-conf.json
// (offlineFlannelConf) patched back into its ConfigMap and kube-flannel
// restarted; it returns once every node runs that conflist.
func (c *cluster) useFlannelIPAM() {
	t := c.t
	t.Helper()
	conf := c.offlineFlannelConf()
	patch, err := json.Marshal(map[string]any{"data": map[string]string{"cni-conf.json": conf}})
	if err != nil {
		t.Fatal(err)
	}
	netConf := c.kubeFlannelConfig()["net-conf.json"]
	c.kubectl("-n", flannelNamespace, "patch", "configmap", flannelConfigMap, "--type=merge", "-p", string(patch))
	c.restartKubeFlannel()
	if got := c.kubeFlannelConfig()["net-conf.json"]; got != netConf {
		t.Fatalf("%s/%s net-conf.json changed by the switch back:\n%s\nwas:\n%s", flannelNamespace, flannelConfigMap, got, netConf)
	}
	c.waitConflists(conf, time.Minute)
}

// setFlannelBackend changes the Backend of kube-flannel's net-conf.json
// (kubectl patch, nothing else changed) and restarts its pods; it returns
// once each node's flanneld has announced the backend on its Node and
// written its lease again.
func (c *cluster) setFlannelBackend(typ string) {
	t := c.t
	t.Helper()
	var nc map[string]any
	if err := json.Unmarshal([]byte(c.kubeFlannelConfig()["net-conf.json"]), &nc); err != nil {
		t.Fatal(err)
	}
	nc["Backend"] = map[string]any{"Type": typ}
	b, err := json.MarshalIndent(nc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{"net-conf.json": string(b) + "\n"}})
	if err != nil {
		t.Fatal(err)
	}
	c.kubectl("-n", flannelNamespace, "patch", "configmap", flannelConfigMap, "--type=merge", "-p", string(patch))
	c.restartKubeFlannel()
	for _, n := range c.nodes {
		eventually(t, n.name+" announced by flanneld with backend "+typ, time.Minute, time.Second, func() (bool, string) {
			no, err := c.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return no.Annotations[annFlannelBackend] == typ, fmt.Sprintf("%s=%q", annFlannelBackend, no.Annotations[annFlannelBackend])
		})
		n.waitLease(time.Minute)
	}
}

// routeTo returns the node's route to prefix (`ip route show`), or "".
func (n *node) routeTo(prefix string) string {
	n.t.Helper()
	return strings.TrimSpace(run(n.t, "ip", "-n", n.ns.Name, "route", "show", prefix))
}

// pingPod runs the harness image's -dial check inside from's running
// container (CRI exec on from's node): one TCP exchange with the -serve of
// the pod at addr, bounded by the image's timeout. It returns the pong.
func (c *cluster) pingPod(from *corev1.Pod, addr string) (string, error) {
	n := c.node(from.Spec.NodeName)
	p, err := c.client.CoreV1().Pods(from.Namespace).Get(context.Background(), from.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID == "" {
		return "", fmt.Errorf("pod %s: container statuses %+v", p.Name, p.Status.ContainerStatuses)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := n.cri.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id,
		Cmd: []string{"/pause", "-dial", addr, "-exit"}, Timeout: 15})
	if err != nil {
		return "", err
	}
	if resp.ExitCode != 0 {
		return "", fmt.Errorf("exit %d: %s%s", resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return strings.TrimSpace(string(resp.Stdout)), nil
}

// txPackets returns the packets the node's link dev has sent (`ip -s link`).
func (n *node) txPackets(dev string) uint64 {
	n.t.Helper()
	out := run(n.t, "ip", "-n", n.ns.Name, "-j", "-s", "link", "show", "dev", dev)
	var links []struct {
		Stats64 struct {
			TX struct{ Packets uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		n.t.Fatalf("%s: ip -s link show %s: %v\n%s", n.name, dev, err, out)
	}
	return links[0].Stats64.TX.Packets
}
