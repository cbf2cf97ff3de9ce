//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stickyip/stickyip/test/harness"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	nodeName   = "node1" // the one-node tests' node
	node2Name  = "node2" // another node: only its identity exists
	podNetwork = "10.244.0.0/16"
	nodeSubnet = "10.244.1.1/24" // FLANNEL_SUBNET: the node's pod range, gateway first
	cniNetwork = "cbr0"          // the network name kube-flannel uses
)

// bins says where the binaries the test runs are.
type bins struct {
	k8s     string // etcd, kube-apiserver, kubelet, ... (scripts/build-k8s.sh)
	project string // stickyip, checkpointd (make build)
}

// k8sRelease is the Kubernetes minor the e2e runs: $E2E_K8S, or the latest
// one scripts/build-k8s.sh builds by default.
func k8sRelease() string {
	if v := os.Getenv("E2E_K8S"); v != "" {
		return v
	}
	return defaultK8sRelease
}

// defaultK8sRelease is the minor of test/e2e/k8sbuild/kube (build-k8s.sh
// builds it into _output/k8s/bin; another release goes to
// _output/k8s/<release>/bin).
const defaultK8sRelease = "1.37"

// k8sBinDir is where scripts/build-k8s.sh put the binaries of k8sRelease;
// $E2E_K8S_BIN overrides it.
func k8sBinDir() string {
	if d := os.Getenv("E2E_K8S_BIN"); d != "" {
		return d
	}
	if r := k8sRelease(); r != defaultK8sRelease {
		return filepath.Join(harness.OutputDir(), "k8s", r, "bin")
	}
	return filepath.Join(harness.OutputDir(), "k8s", "bin")
}

// findBins skips the test unless it runs as root with every component built.
func findBins(t testing.TB) bins {
	t.Helper()
	harness.RequireRoot(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := bins{k8s: k8sBinDir(), project: filepath.Join(root, "bin")}
	b.require(t, "etcd", "kube-apiserver", "kubelet")
	return b
}

// require skips (or, in strict mode, fails) the test unless the
// Kubernetes binaries names are built.
func (b bins) require(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(b.k8s, n)); err != nil {
			missing(t, "%s missing (run E2E_K8S=%s scripts/build-k8s.sh, or make test-e2e)", filepath.Join(b.k8s, n), k8sRelease())
		}
	}
}

// missing skips the test for a missing component, or fails it in strict
// mode (harness.Missing: make test-e2e builds everything, so there a
// missing binary is a bug, not a reason to skip).
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	harness.Missing(t, "e2e: "+format, args...)
}

// nodeOptions choose what the node runs.
type nodeOptions struct {
	ipam string // "stickyip", "host-local", or "installed" (the conflist names stickyip, deploy/install puts it in the bin dir)
	// cni, when set, writes the node's CNI config instead of the flannel
	// conflist and returns extra binaries for the CNI bin dir.
	cni func(n *node) []string
	// flannel: real flannel installs the node's network (kube-flannel.yml,
	// see newFlannelCluster): the node starts with no CNI config, no flannel
	// plugin in its CNI bin dir and no subnet.env (no stand-in); its
	// subnet is flanneld's lease once written.
	flannel bool
	// ipamConf: keys set in the ipam block of the project's conflist
	// (writeCNIConfig), e.g. holderWait.
	ipamConf map[string]any
}

// node is a simulated Kubernetes node: its kubelet, containerd (from
// test/harness, with the pause image), the flannel CNI chain with its own
// subnet and, when a test starts it, checkpointd, all inside a network
// namespace the test creates. The one-node tests (newNode) run the control
// plane in the same namespace, on its loopback; a cluster's nodes
// (newFlannelCluster) each have their own namespace and mount namespace.
type node struct {
	// The control plane the node registers with; its client (admin), CA
	// and tokens are the test's way into the API.
	*controlPlane

	t    testing.TB
	bins bins
	opts nodeOptions
	// shippedPaths: the shipped host paths (/etc/cni/net.d,
	// /var/lib/cni/stickyip, /run/flannel, ...) are the node's own in its
	// mount namespace (bindNodePaths), so its components use them as a real
	// node's do.
	shippedPaths bool
	name         string // the Node's name; the kubelet is system:node:<name>
	ip           string // the kubelet's --node-ip
	dir          string // kubelet root, CNI config and data, checkpoints
	logDir       string
	ns           *harness.Netns
	nsHandle     ns.NetNS
	// mnt is the node's own mount namespace, shared by its containerd,
	// kubelet and checkpointd.
	mnt *harness.MountNS

	ctd       *harness.Containerd
	cniBinDir string // the CNI bin dir containerd runs plugins from
	cri       *harness.CRIClient

	kubelet, checkpointd *proc

	subnet   string    // the node's flannel lease (FLANNEL_SUBNET)
	flanneld *flanneld // the stand-in; nil when real flannel runs (opts.flannel)

	kubeProxy *proc // real flannel's clusters only
}

// newNode creates a node named node1 with its control plane in one network
// namespace, and its directories, and registers the cleanup of everything
// the node will start.
func newNode(t testing.TB, opts nodeOptions) *node {
	t.Helper()
	b := findBins(t)
	logDir := testLogDir(t)
	netns, h := newNetns(t, "node")
	n := &node{t: t, bins: b, opts: opts, name: nodeName, ip: "127.0.0.1", dir: harness.ShortTempDir(t),
		logDir: logDir, ns: netns, nsHandle: h, subnet: nodeSubnet}
	n.controlPlane = newControlPlane(t, b, n.dir, logDir, netns, h, "127.0.0.1", nodeName, node2Name)
	n.init()
	// Its own mount namespace, as a cluster node's: the kubelet's
	// device-plugin directory is the node's, so one-node scenarios run side
	// by side (scripts/run-e2e.sh).
	n.mnt = harness.NewMountNS(t, map[string]string{devicePluginDir: filepath.Join(n.dir, "device-plugins")})
	return n
}

// init checks the node's IPAM is built, writes its kubeconfig, mounts its
// /run and registers its cleanup.
func (n *node) init() {
	t := n.t
	t.Helper()
	if n.opts.ipam == "stickyip" {
		if _, err := os.Stat(filepath.Join(n.bins.project, "stickyip")); err != nil {
			missing(t, "%s missing (make build)", filepath.Join(n.bins.project, "stickyip"))
		}
	}
	t.Cleanup(n.cleanup)
	n.writeKubeconfig(n.kubeconfig(), nodeUser(n.name))
	n.mountRun()
	t.Logf("node %s: netns %s, state %s, logs %s", n.name, n.ns.Name, n.dir, n.logDir)
}

// testLogDir is _output/e2e-logs/<test>, emptied.
func testLogDir(t testing.TB) string {
	t.Helper()
	d := filepath.Join(harness.OutputDir(), "e2e-logs", strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// newNetns creates a network namespace (removed at cleanup) and opens a
// handle to it (closed at cleanup).
func newNetns(t testing.TB, prefix string) (*harness.Netns, ns.NetNS) {
	t.Helper()
	n := harness.NewNetns(t, prefix)
	h, err := ns.GetNS(n.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return n, h
}

// cleanup runs after the components' own cleanups (registered later, so run
// earlier): on failure it prints the end of every log.
func (n *node) cleanup() {
	t := n.t
	if t.Failed() {
		printTails(t, n.checkpointd, n.kubelet)
		if n.ctd != nil {
			t.Logf("containerd's log: %s", filepath.Join(n.logDir, "containerd.log"))
		}
	}
	// The kubelet bind-mounts its root dir onto itself (shared propagation).
	unmountUnder(t, n.dir)
}

// start starts a component of the node in its namespaces, with env added.
func (n *node) start(name string, env []string, argv ...string) *proc {
	n.t.Helper()
	return startProc(n.t, n.logDir, n.ns.Path, n.mnt, env, name, argv...)
}

// nodeToken is the bearer token of the node's kubelet (system:node:<name>).
func (n *node) nodeToken() string { return n.tokens[nodeUser(n.name)] }

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(t testing.TB, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mps = append(mps, f[4])
		}
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	for _, mp := range mps {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
			t.Errorf("cleanup: unmount %s: %v", mp, err)
		}
	}
}

// podLogsDir is the kubelet's podLogsDir: <ns>_<pod>_<uid>/<container>/<restarts>.log.
func (n *node) podLogsDir() string { return filepath.Join(n.dir, "pod-logs") }

func (n *node) staticPodDir() string    { return filepath.Join(n.dir, "manifests") }
func (n *node) runDir() string          { return filepath.Join(n.dir, "run") } // the node's /run: tmpfs
func (n *node) subnetFile() string      { return filepath.Join(n.runDir(), "flannel", "subnet.env") }
func (n *node) stickyipDataDir() string { return filepath.Join(n.dir, "stickyip") }
func (n *node) cniConfDir() string      { return filepath.Join(n.dir, "cni", "net.d") }
func (n *node) kubeconfig() string      { return filepath.Join(n.dir, "kubelet.kubeconfig") }

// writeCNIConfig writes the project's flannel conflist (conf/, flannel →
// bridge → stickyip, plus portmap) with its paths moved into the test's
// directory, or with host-local as IPAM. The subnet file is on the node's
// tmpfs /run, written by the flanneld stand-in (startFlanneld).
func (n *node) writeCNIConfig() {
	t := n.t
	t.Helper()
	conflist := harness.ShippedConflist(t, "10-flannel-stickyip.conflist")
	flannel := conflist["plugins"].([]any)[0].(map[string]any)
	flannel["subnetFile"] = n.subnetFile()
	flannel["dataDir"] = filepath.Join(n.dir, "flannel", "data")
	ipam := flannel["ipam"].(map[string]any)
	ipam["dataDir"] = n.stickyipDataDir()
	ipam["hostLocalDataDir"] = filepath.Join(n.dir, "host-local")
	ipam["logFile"] = filepath.Join(n.logDir, "stickyip.log")
	maps.Copy(ipam, n.opts.ipamConf)
	if n.opts.ipam == "host-local" {
		flannel["ipam"] = map[string]any{"type": "host-local", "dataDir": filepath.Join(n.dir, "host-local")}
	}
	n.writeConflist(conflist)
}

// writeConflist writes conflist as the node's flannel conflist; it must name
// the network kube-flannel names.
func (n *node) writeConflist(conflist map[string]any) {
	t := n.t
	t.Helper()
	if name := conflist["name"]; name != cniNetwork {
		t.Fatalf("conflist names network %v, want %s", name, cniNetwork)
	}
	js, err := json.MarshalIndent(conflist, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.cniConfDir(), "10-flannel.conflist"), js, 0o644)
}

// kubeletSyncFrequency is the kubelets' syncFrequency: each pod is synced
// again at most 1.5 times this long after its last sync (the pod workers'
// resync, jittered by up to half).
const kubeletSyncFrequency = 10 * time.Second

// writeKubeletConfig writes the KubeletConfiguration (ENVIRONMENT.md's
// settings for this machine) pointing at the node's containerd.
func (n *node) writeKubeletConfig() {
	t := n.t
	t.Helper()

	if err := os.MkdirAll(n.staticPodDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.dir, "kubelet.yaml"), []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
fileCheckFrequency: 2s
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
readOnlyPort: 0
address: 127.0.0.1
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
nodeStatusUpdateFrequency: 5s
syncFrequency: %s
evictionHard:
  memory.available: "1Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.staticPodDir(), n.ctd.Address, n.podLogsDir(), kubeletSyncFrequency)), 0o644)
}

// startContainerd starts the node's containerd (test/harness: own mount
// namespace, node netns, pause image imported) on the CNI chain.
func (n *node) startContainerd() {
	t := n.t
	t.Helper()
	var extra []string
	if n.opts.ipam == "stickyip" {
		extra = append(extra, filepath.Join(n.bins.project, "stickyip"))
	}
	switch {
	case n.opts.flannel: // kube-flannel's pods install the plugin and the config
	case n.opts.cni != nil:
		extra = append(extra, n.opts.cni(n)...)
	default:
		n.writeCNIConfig()
		n.startFlanneld()
	}
	n.cniBinDir = harness.CNIBinDir(t, extra...)
	if n.opts.flannel {
		if err := os.Remove(filepath.Join(n.cniBinDir, "flannel")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(n.cniConfDir(), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.ctd = harness.StartContainerd(t, harness.ContainerdConfig{
		Node: n.ns, MountNS: n.mnt, CNIBinDir: n.cniBinDir, CNIConfDir: n.cniConfDir(),
		NetworkLater: n.opts.flannel,
	})
	// The harness removes containerd's directory at cleanup; keep its log
	// with the others (this runs before that removal).
	t.Cleanup(func() {
		if b, err := os.ReadFile(n.ctd.LogPath); err == nil {
			_ = os.WriteFile(filepath.Join(n.logDir, "containerd.log"), b, 0o644)
		}
	})
	n.cri = n.ctd.CRI(t)
	n.writeKubeletConfig()
	if n.opts.flannel {
		return // the network is ready once kube-flannel has installed it
	}
	eventually(t, "containerd network ready", time.Minute, 500*time.Millisecond, func() (bool, string) {
		err := n.cri.Ready(context.Background())
		return err == nil, fmt.Sprint(err)
	})
}

// startKubelet starts the kubelet; with waitReady it waits until the node is
// Ready in the API.
func (n *node) startKubelet(waitReady bool) {
	t := n.t
	t.Helper()
	n.kubelet = n.start("kubelet", nil, filepath.Join(n.bins.k8s, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+n.kubeconfig(),
		"--hostname-override="+n.name, "--node-ip="+n.ip,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		// Its serving certificate; the default is /var/lib/kubelet/pki
		// whatever --root-dir says.
		"--cert-dir="+filepath.Join(n.dir, "kubelet-pki"),
		// kubelet.go's level 4 only: each periodic resync ("SyncLoop
		// (SYNC) pods") and each pod sync's end ("SyncPod exit"), the
		// proof that the kubelet had its chance (kubeletSynced).
		"--v=2", "--vmodule=kubelet=4")
	if waitReady {
		n.waitReady()
	}
}

// waitReady waits until the node is Ready in the API and checks it runs the
// kubelet release of the run.
func (n *node) waitReady() {
	t := n.t
	t.Helper()
	ctx := context.Background()
	eventually(t, "node "+n.name+" Ready", 3*time.Minute, time.Second, func() (bool, string) {
		if err := n.kubelet.exited(); err != nil {
			t.Fatal(err)
		}
		no, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range no.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition"
	})
	checkKubeletVersion(t, n.client, n.name)
}

// checkKubeletVersion fails the test unless the node's kubelet is of the
// release the run selected (E2E_K8S), so a run never passes on other binaries.
func checkKubeletVersion(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	no, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := no.Status.NodeInfo.KubeletVersion
	if !strings.HasPrefix(v, "v"+k8sRelease()+".") {
		t.Fatalf("node %s runs kubelet %s, want release %s (E2E_K8S)", name, v, k8sRelease())
	}
	t.Logf("node %s Ready: kubelet %s, runtime %s", name, v, no.Status.NodeInfo.ContainerRuntimeVersion)
}

// powerOff simulates the node losing power while its disk survives: the
// kubelet and checkpointd are killed, containerd crashes with every sandbox
// and container process (harness Crash: no CNI DEL, its state dir with the
// pod netns mounts wiped) and the cni0 bridge goes. A node with its own
// mount namespace (a cluster node) loses every mount made in it
// (MountNS.Reboot, at powerOn), and with real flannel also what flanneld,
// kube-proxy and the CNI plugins put in the kernel (resetNetwork).
func (n *node) powerOff() {
	t := n.t
	t.Helper()
	if n.checkpointd != nil {
		n.checkpointd.stop(t, syscall.SIGKILL, 10*time.Second)
	}
	n.kubelet.stop(t, syscall.SIGKILL, 10*time.Second)
	if n.kubeProxy != nil {
		n.kubeProxy.stop(t, syscall.SIGKILL, 10*time.Second)
	}
	if n.flanneld != nil {
		n.flanneld.stop()
	}
	n.ctd.Crash(t)
	if _, err := n.ns.Exec(nil, "ip", "link", "del", "cni0"); err != nil {
		t.Logf("power off: %v", err)
	}
	if n.opts.flannel {
		n.resetNetwork()
	}
	n.clearRun()
	t.Log("node powered off: kubelet, runtime, sandboxes, pod netns and /run (flannel's lease, checkpointd's files) gone")
}

// resetNetwork removes from the node's network namespace what a reboot
// takes and flanneld, kube-proxy and the CNI plugins made: flanneld's vxlan
// link (and with it its routes), the other routes into the pod network
// (host-gw's), every iptables rule and chain (IPv4 and IPv6). eth0, its
// address and its default route are the node's boot configuration and stay.
func (n *node) resetNetwork() {
	t := n.t
	t.Helper()
	if _, err := n.ns.Exec(nil, "ip", "link", "del", "flannel.1"); err != nil {
		t.Logf("power off: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(run(t, "ip", "-n", n.ns.Name, "-o", "route", "show", "root", podNetwork)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			run(t, "ip", "-n", n.ns.Name, "route", "del", f[0])
		}
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			for _, op := range []string{"-F", "-X"} {
				if _, err := n.ns.Exec(nil, cmd, "-w", "5", "-t", table, op); err != nil {
					t.Fatalf("power off: %s -t %s %s: %v", cmd, table, op, err)
				}
			}
		}
	}
}

// powerOn boots the node again: containerd, the kubelet (not waiting for
// the API) and, when the test runs it, checkpointd. The flanneld stand-in
// starts too; real flanneld is a pod the kubelet starts once it can read it
// from the API server. A node with its own mount namespace boots with a
// fresh one (MountNS.Reboot): its binds made again, the node's /run the
// empty tmpfs powerOff left.
func (n *node) powerOn() {
	t := n.t
	t.Helper()
	if !n.opts.flannel {
		n.startFlanneld()
	}
	if n.mnt != nil {
		n.mnt.Reboot(t)
	}
	n.ctd.Restart(t)
	n.rebindCRISocket()
	if n.kubeProxy != nil {
		n.startKubeProxy()
	}
	n.startKubelet(false)
	if n.checkpointd != nil {
		n.startCheckpointd()
	}
	t.Log("node powered on")
}

// rebindCRISocket binds containerd's socket again where bindNodePaths put
// it, once containerd has made it again (the bind was of the old one).
func (n *node) rebindCRISocket() {
	if n.mnt != nil && n.mnt.Bound(shippedCRISocket) {
		n.mnt.Bind(n.t, shippedCRISocket, n.ctd.Address)
	}
}

// restartContainerd restarts the node's containerd as `systemctl restart
// containerd` does: SIGTERM, its shims and the pods keep running, then a
// start on the same directories (harness Containerd.Stop, Restart).
func (n *node) restartContainerd() {
	n.t.Helper()
	n.ctd.Stop(n.t)
	n.ctd.Restart(n.t)
	n.rebindCRISocket()
}

// sandbox is what the test reads about a pod sandbox from the runtime.
type sandbox struct {
	ID, Namespace, Name, UID string
	Ready                    bool
	IP                       string
	Annotations              map[string]string
}

// readySandboxes returns the ready sandboxes of the pod ns/name as the
// runtime sees them (static pods are named <name>-<node>).
func (n *node) readySandboxes(ctx context.Context, namespace, name string) ([]sandbox, error) {
	return n.readySandboxesWhere(ctx, func(p *runtimeapi.PodSandbox) bool {
		md := p.GetMetadata()
		return md.GetNamespace() == namespace && md.GetName() == name
	})
}

// readySandboxesWhere returns the ready sandboxes the runtime lists that keep
// accepts, with their IPs.
func (n *node) readySandboxesWhere(ctx context.Context, keep func(*runtimeapi.PodSandbox) bool) ([]sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pods, err := n.cri.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandbox
	for _, p := range pods {
		if !keep(p) {
			continue
		}
		st, err := n.cri.PodStatus(ctx, p.Id)
		if status.Code(err) == codes.NotFound {
			continue // removed since the list (the kubelet's cleanup of a deleted pod's): not ready
		}
		if err != nil {
			return nil, err
		}
		if !st.Ready {
			continue
		}
		md := p.GetMetadata()
		sb := sandbox{ID: p.Id, Namespace: md.GetNamespace(), Name: md.GetName(), UID: md.GetUid(), Ready: true, Annotations: p.Annotations}
		if len(st.IPs) > 0 {
			sb.IP = st.IPs[0]
		}
		out = append(out, sb)
	}
	return out, nil
}

// kubeletLogMark is the kubelet log's length now: what the kubelet logs
// after it is read from there (the file only grows; a restarted kubelet
// appends).
func (n *node) kubeletLogMark() int64 {
	st, err := os.Stat(n.kubeletLogPath())
	if err != nil {
		n.t.Fatal(err)
	}
	return st.Size()
}

// kubeletLogPath is the kubelet's log, every kubelet of the node appending
// to it (also while none runs: a power cut).
func (n *node) kubeletLogPath() string { return filepath.Join(n.logDir, "kubelet.log") }

// kubeletLogSince returns the kubelet log's lines after mark.
func (n *node) kubeletLogSince(mark int64) []string {
	f, err := os.Open(n.kubeletLogPath())
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(mark, io.SeekStart); err != nil {
		n.t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		n.t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// kubeletPod is a pod as the kubelet's log names it.
type kubeletPod struct{ ref, uid string } // namespace/name, UID

// kubeletResynced reports which of pods the kubelet has synced in a
// periodic resync in its log after mark: a "SyncLoop (SYNC) pods" line
// naming the pod, then a "SyncPod exit" of its UID (kubelet.go's level 4,
// which startKubelet turns on). A sync is where the kubelet decides to
// re-create a sandbox or restart a container; the periodic one comes
// within 1.5 × kubeletSyncFrequency of the pod's last.
func (n *node) kubeletResynced(mark int64, pods []kubeletPod) map[kubeletPod]bool {
	due := map[string]bool{} // refs named by a periodic resync so far
	out := map[kubeletPod]bool{}
	for _, l := range n.kubeletLogSince(mark) {
		switch {
		case strings.Contains(l, `"SyncLoop (SYNC) pods"`):
			for _, p := range pods {
				if strings.Contains(l, `"`+p.ref+`"`) {
					due[p.ref] = true
				}
			}
		case strings.Contains(l, `"SyncPod exit"`):
			for _, p := range pods {
				if due[p.ref] && strings.Contains(l, `podUID="`+p.uid+`"`) {
					out[p] = true
				}
			}
		}
	}
	return out
}

// waitKubeletResynced waits until the kubelet has synced each of pods in a
// periodic resync after mark (kubeletResynced), at most timeout.
func (n *node) waitKubeletResynced(mark int64, pods []kubeletPod, what string, timeout time.Duration) {
	t := n.t
	t.Helper()
	start := time.Now()
	eventually(t, "the kubelet of "+n.name+" resyncs "+what, timeout, 500*time.Millisecond, func() (bool, string) {
		done := n.kubeletResynced(mark, pods)
		var left []string
		for _, p := range pods {
			if !done[p] {
				left = append(left, p.ref+" "+p.uid)
			}
		}
		return len(left) == 0, fmt.Sprintf("not yet: %v", left)
	})
	t.Logf("the kubelet of %s resynced %s (%s)", n.name, what, time.Since(start).Round(100*time.Millisecond))
}

// waitKubeletLine waits until the kubelet logs, after mark, a line match
// takes, and returns the log's offset past that line.
func (n *node) waitKubeletLine(mark int64, what string, timeout time.Duration, match func(string) bool) int64 {
	t := n.t
	t.Helper()
	var at int64
	eventually(t, "the kubelet of "+n.name+" logs "+what, timeout, 500*time.Millisecond, func() (bool, string) {
		off := mark
		for _, l := range n.kubeletLogSince(mark) {
			off += int64(len(l)) + 1
			if match(l) {
				at = off
				return true, ""
			}
		}
		return false, "no such line yet"
	})
	return at
}

// sandboxPod names the pod of sandbox id as the kubelet's log does.
func (n *node) sandboxPod(ctx context.Context, id string) kubeletPod {
	st, err := n.cri.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		n.t.Fatal(err)
	}
	m := st.GetStatus().GetMetadata()
	return kubeletPod{ref: m.Namespace + "/" + m.Name, uid: m.Uid}
}
