//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	nodeName   = "node1"
	node2Name  = "node2" // another node: only its identity exists
	apiAddr    = "127.0.0.1:6443"
	etcdAddr   = "127.0.0.1:2379"
	podNetwork = "10.244.0.0/16"
	nodeSubnet = "10.244.1.1/24" // FLANNEL_SUBNET: the node's pod range, gateway first
	cniNetwork = "cbr0"          // the network name kube-flannel uses
)

// bins says where the binaries the test runs are.
type bins struct {
	k8s     string // etcd, kube-apiserver, kubelet (scripts/build-k8s.sh)
	project string // stickyip, checkpointd (make build)
}

// findBins skips the test unless it runs as root with every component built.
func findBins(t *testing.T) bins {
	t.Helper()
	harness.RequireRoot(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := bins{k8s: filepath.Join(harness.OutputDir(), "k8s", "bin"), project: filepath.Join(root, "bin")}
	if d := os.Getenv("E2E_K8S_BIN"); d != "" {
		b.k8s = d
	}
	for _, n := range []string{"etcd", "kube-apiserver", "kubelet"} {
		if _, err := os.Stat(filepath.Join(b.k8s, n)); err != nil {
			missing(t, "%s missing (run scripts/build-k8s.sh, or make test-e2e)", filepath.Join(b.k8s, n))
		}
	}
	return b
}

// missing skips the test for a missing component, or fails it when
// E2E_STRICT is set (make test-e2e builds everything, so there a missing
// binary is a bug, not a reason to skip).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("E2E_STRICT") != "" {
		t.Fatalf("e2e: "+format, args...)
	}
	t.Skipf("e2e: "+format, args...)
}

// nodeOptions choose what the node runs.
type nodeOptions struct {
	ipam string // "stickyip" or "host-local"
	// cni, when set, writes the node's CNI config instead of the flannel
	// conflist and returns extra binaries for the CNI bin dir.
	cni func(n *node) []string
}

// node is a simulated Kubernetes node with its control plane: everything
// runs inside one network namespace the test creates, on its loopback.
// containerd comes from test/harness (own mount namespace, pause image).
type node struct {
	t        *testing.T
	bins     bins
	opts     nodeOptions
	dir      string // etcd data, kubelet root, CNI config and data, checkpoints
	logDir   string
	ns       *harness.Netns
	nsHandle ns.NetNS

	adminToken, kubeletToken string
	node2Token               string // another node's identity (system:node:node2)
	caPEM                    []byte
	client                   *kubernetes.Clientset
	ctd                      *harness.Containerd
	cniBinDir                string // the CNI bin dir containerd runs plugins from
	cri                      *harness.CRIClient

	etcd, apiserver, kubelet, checkpointd *proc

	subnet   string // the node's flannel lease (FLANNEL_SUBNET)
	flanneld *flanneld
}

// newNode creates the node's network namespace and directories and
// registers the cleanup of everything the node will start.
func newNode(t *testing.T, opts nodeOptions) *node {
	t.Helper()
	b := findBins(t)
	if opts.ipam == "stickyip" {
		if _, err := os.Stat(filepath.Join(b.project, "stickyip")); err != nil {
			missing(t, "%s missing (make build)", filepath.Join(b.project, "stickyip"))
		}
	}
	n := &node{t: t, bins: b, opts: opts, dir: harness.ShortTempDir(t), subnet: nodeSubnet}
	n.logDir = filepath.Join(harness.OutputDir(), "e2e-logs", strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.RemoveAll(n.logDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.ns = harness.NewNetns(t, "node")
	h, err := ns.GetNS(n.ns.Path)
	if err != nil {
		t.Fatal(err)
	}
	n.nsHandle = h
	t.Cleanup(n.cleanup)
	n.mountRun()
	t.Logf("node %s: netns %s, state %s, logs %s", nodeName, n.ns.Name, n.dir, n.logDir)
	return n
}

// cleanup runs after the components' own cleanups (registered later, so run
// earlier): on failure it prints the end of every log.
func (n *node) cleanup() {
	t := n.t
	if t.Failed() {
		for _, p := range []*proc{n.checkpointd, n.kubelet, n.apiserver, n.etcd} {
			if p != nil {
				t.Logf("---- last lines of %s (%s)\n%s", p.name, p.logPath, tail(p.logPath, 40))
			}
		}
		if n.ctd != nil {
			p := filepath.Join(n.logDir, "containerd.log")
			t.Logf("---- last lines of containerd (%s)\n%s", p, tail(p, 40))
		}
	}
	n.nsHandle.Close()
	// The kubelet bind-mounts its root dir onto itself (shared propagation).
	unmountUnder(t, n.dir)
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
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

// apiClientConfig returns a client config that reaches the API server on the
// node's loopback: every connection is dialled from inside the node's netns.
func (n *node) apiClientConfig(token string) *rest.Config {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &rest.Config{
		Host:            "https://" + apiAddr,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: n.caPEM},
		Timeout:         15 * time.Second,
		QPS:             50,
		Burst:           100,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := n.nsHandle.Do(func(ns.NetNS) error {
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
}

// startControlPlane starts etcd and kube-apiserver and waits until the API
// answers; the first time it also writes certificates, keys and tokens.
func (n *node) startControlPlane() {
	t := n.t
	t.Helper()
	pki := filepath.Join(n.dir, "pki")
	if n.caPEM == nil {
		n.caPEM = writeServingCert(t, pki)
		writeFile(t, filepath.Join(pki, "ca.crt"), n.caPEM, 0o644)
		writeServiceAccountKeys(t, pki)
		n.adminToken, n.kubeletToken, n.node2Token = randomToken(t), randomToken(t), randomToken(t)
		tokens := fmt.Sprintf("%s,admin,admin,system:masters\n%s,system:node:%s,%s,system:nodes\n%s,system:node:%s,%s,system:nodes\n",
			n.adminToken, n.kubeletToken, nodeName, nodeName, n.node2Token, node2Name, node2Name)
		writeFile(t, filepath.Join(pki, "tokens.csv"), []byte(tokens), 0o600)
		writeFile(t, filepath.Join(n.dir, "kubelet.kubeconfig"), []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: kubelet
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: kubelet}
current-context: e2e
`, apiAddr, filepath.Join(pki, "ca.crt"), n.kubeletToken)), 0o600)
		cs, err := kubernetes.NewForConfig(n.apiClientConfig(n.adminToken))
		if err != nil {
			t.Fatal(err)
		}
		n.client = cs
	}
	if n.etcd == nil || !n.etcd.running() {
		n.etcd = startProc(t, n.logDir, n.ns.Path, "etcd", filepath.Join(n.bins.k8s, "etcd"),
			"--name=e2e", "--data-dir="+filepath.Join(n.dir, "etcd"),
			"--listen-client-urls=http://"+etcdAddr, "--advertise-client-urls=http://"+etcdAddr,
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=e2e=http://127.0.0.1:2380", "--log-level=warn")
		n.waitEtcd()
	}
	n.startAPIServer()
}

func (n *node) waitEtcd() {
	t := n.t
	t.Helper()
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.apiClientConfig("").Dial}}
	eventually(t, "etcd healthy", time.Minute, 500*time.Millisecond, func() (bool, string) {
		if err := n.etcd.exited(); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get("http://" + etcdAddr + "/health")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			return false, err.Error()
		}
		return h.Health == "true", "health=" + h.Health
	})
}

// startAPIServer starts kube-apiserver and waits for /readyz.
func (n *node) startAPIServer() {
	t := n.t
	t.Helper()
	pki := filepath.Join(n.dir, "pki")
	n.apiserver = startProc(t, n.logDir, n.ns.Path, "kube-apiserver", filepath.Join(n.bins.k8s, "kube-apiserver"),
		"--etcd-servers=http://"+etcdAddr,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
		"--tls-cert-file="+filepath.Join(pki, "serving.crt"), "--tls-private-key-file="+filepath.Join(pki, "serving.key"),
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		// Real authorization: the kubelet and checkpointd act as
		// system:node:node1, which the Node authorizer limits to the node's
		// own pods and what they use; NodeRestriction limits what a node may
		// change.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--audit-policy-file="+n.auditPolicy(),
		"--audit-log-path="+n.auditLogPath(), "--audit-log-format=json", "--audit-log-maxbackup=0",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24",
		"--cert-dir="+filepath.Join(n.dir, "apiserver-certs"),
		"--allow-privileged=true",
		"--v=1")
	ctx := context.Background()
	eventually(t, "kube-apiserver ready", 2*time.Minute, time.Second, func() (bool, string) {
		if err := n.apiserver.exited(); err != nil {
			t.Fatal(err)
		}
		body, err := n.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return string(body) == "ok", string(body)
	})
	n.ensureNamespace("default")
}

// ensureNamespace creates namespace ns (if needed) and its default service
// account, which the ServiceAccount admission plugin wants before it admits
// pods (no controller-manager runs to create it).
func (n *node) ensureNamespace(ns string) {
	t := n.t
	t.Helper()
	ctx := context.Background()
	eventually(t, "namespace "+ns+" and its default service account", time.Minute, time.Second, func() (bool, string) {
		_, err := n.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error()
		}
		_, err = n.client.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, ""
		}
		return false, err.Error()
	})
}

// auditPolicy writes the API server's audit policy: pod lists and watches
// only, when received, so a test can count the watches a client opens.
func (n *node) auditPolicy() string {
	p := filepath.Join(n.dir, "pki", "audit-policy.yaml")
	writeFile(n.t, p, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
  verbs: ["watch", "list"]
  resources: [{group: "", resources: ["pods"]}]
- level: None
`), 0o644)
	return p
}

func (n *node) auditLogPath() string { return filepath.Join(n.logDir, "audit.log") }

// stopAPIServer stops the API server (etcd keeps its data and keeps running).
func (n *node) stopAPIServer() {
	n.t.Helper()
	n.apiserver.stop(n.t, syscall.SIGTERM, 30*time.Second)
	n.t.Log("kube-apiserver stopped")
}

// podLogsDir is the kubelet's podLogsDir: <ns>_<pod>_<uid>/<container>/<restarts>.log.
func (n *node) podLogsDir() string { return filepath.Join(n.dir, "pod-logs") }

func (n *node) staticPodDir() string    { return filepath.Join(n.dir, "manifests") }
func (n *node) runDir() string          { return filepath.Join(n.dir, "run") } // the node's /run: tmpfs
func (n *node) subnetFile() string      { return filepath.Join(n.runDir(), "flannel", "subnet.env") }
func (n *node) stickyipDataDir() string { return filepath.Join(n.dir, "stickyip") }
func (n *node) cniConfDir() string      { return filepath.Join(n.dir, "cni", "net.d") }

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
	if n.opts.ipam == "host-local" {
		flannel["ipam"] = map[string]any{"type": "host-local", "dataDir": filepath.Join(n.dir, "host-local")}
	}
	if name := conflist["name"]; name != cniNetwork {
		t.Fatalf("conf/10-flannel-stickyip.conflist: network name %v, want %s", name, cniNetwork)
	}
	js, err := json.MarshalIndent(conflist, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.cniConfDir(), "10-flannel.conflist"), js, 0o644)
}

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
syncFrequency: 10s
evictionHard:
  memory.available: "1Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.staticPodDir(), n.ctd.Address, n.podLogsDir())), 0o644)
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
	if n.opts.cni != nil {
		extra = append(extra, n.opts.cni(n)...)
	} else {
		n.writeCNIConfig()
		n.startFlanneld()
	}
	n.cniBinDir = harness.CNIBinDir(t, extra...)
	n.ctd = harness.StartContainerd(t, harness.ContainerdConfig{
		Node: n.ns, CNIBinDir: n.cniBinDir, CNIConfDir: n.cniConfDir(),
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
	n.kubelet = startProc(t, n.logDir, n.ns.Path, "kubelet", filepath.Join(n.bins.k8s, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--hostname-override="+nodeName, "--node-ip=127.0.0.1",
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--v=2")
	if !waitReady {
		return
	}
	ctx := context.Background()
	eventually(t, "node Ready", 3*time.Minute, time.Second, func() (bool, string) {
		if err := n.kubelet.exited(); err != nil {
			t.Fatal(err)
		}
		no, err := n.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
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
}

// powerOff simulates the node losing power while its disk survives: the
// kubelet and checkpointd are killed, containerd crashes with every sandbox
// and container process (harness Crash: no CNI DEL, its state dir with the
// pod netns mounts wiped) and the cni0 bridge goes.
func (n *node) powerOff() {
	t := n.t
	t.Helper()
	if n.checkpointd != nil {
		n.checkpointd.stop(t, syscall.SIGKILL, 10*time.Second)
	}
	n.kubelet.stop(t, syscall.SIGKILL, 10*time.Second)
	n.flanneld.stop()
	n.ctd.Crash(t)
	if _, err := n.ns.Exec(nil, "ip", "link", "del", "cni0"); err != nil {
		t.Logf("power off: %v", err)
	}
	n.clearRun()
	t.Log("node powered off: kubelet, runtime, sandboxes, pod netns and /run (flannel's lease, checkpointd's files) gone")
}

// powerOn boots the node again: containerd, the kubelet (not waiting for
// the API) and, when the test runs it, checkpointd.
func (n *node) powerOn() {
	t := n.t
	t.Helper()
	n.startFlanneld()
	n.ctd.Restart(t)
	n.startKubelet(false)
	if n.checkpointd != nil {
		n.startCheckpointd()
	}
	t.Log("node powered on")
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
