//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
)

const (
	etcdAddr = "127.0.0.1:2379" // in the control plane's network namespace
	apiPort  = "6443"

	adminUser             = "admin" // in system:masters
	schedulerUser         = "system:kube-scheduler"
	controllerManagerUser = "system:kube-controller-manager"
	kubeProxyUser         = "system:kube-proxy" // the RBAC bootstrap policy's system:node-proxier

	// serviceCIDR is the API server's --service-cluster-ip-range;
	// kubernetesServiceIP, its first address, the "kubernetes" Service's
	// ClusterIP (KUBERNETES_SERVICE_HOST of in-cluster clients such as
	// flanneld), which the serving certificate names.
	serviceCIDR         = "10.96.0.0/24"
	kubernetesServiceIP = "10.96.0.1"
)

// nodeUser is the identity of node name's kubelet (and checkpointd), which
// the Node authorizer and NodeRestriction know by this form.
func nodeUser(name string) string { return "system:node:" + name }

// controlPlane is etcd and kube-apiserver (for a cluster also kube-scheduler
// and kube-controller-manager), run inside a network namespace the test
// made: a node's, as on a control-plane node. The API server serves on
// host:6443 with token-file authentication, Node and RBAC authorization and
// NodeRestriction.
type controlPlane struct {
	t        testing.TB
	bins     bins
	dir      string // pki/, etcd data, the API server's cert dir
	logDir   string
	ns       *harness.Netns
	nsHandle ns.NetNS
	host     string // the API server's address in that namespace

	// tokens maps each user of the token file to its bearer token: admin,
	// system:node:<name> for every node name given, the scheduler, the
	// controller-manager and kube-proxy.
	tokens     map[string]string
	adminToken string
	caPEM      []byte
	client     *kubernetes.Clientset // as admin

	etcd, apiserver, scheduler, controllerManager *proc
	placementController                           *proc // stickyip-controller, once started

	// clusterCIDR, when set, makes the controller-manager allocate each
	// Node's spec.podCIDR from it (--allocate-node-cidrs), as flanneld with
	// --kube-subnet-mgr needs.
	clusterCIDR string

	// auditRules, when set before the API server starts, are audit policy
	// rules put before the policy's last (level None): for a test that
	// counts requests the others do not log.
	auditRules string
}

// newControlPlane prepares a control plane in the namespace n (handle h),
// serving on host, with identities for the nodes named; its files go to
// dir and its logs to logDir. Nothing runs before startControlPlane.
func newControlPlane(t testing.TB, b bins, dir, logDir string, n *harness.Netns, h ns.NetNS, host string, nodes ...string) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, bins: b, dir: dir, logDir: logDir, ns: n, nsHandle: h, host: host, tokens: map[string]string{}}
	t.Cleanup(cp.printLogsOnFailure)
	pki := cp.pki()
	cp.caPEM = writeServingCert(t, pki, net.ParseIP(host), net.ParseIP(kubernetesServiceIP))
	writeFile(t, filepath.Join(pki, "ca.crt"), cp.caPEM, 0o644)
	writeServiceAccountKeys(t, pki)
	var lines strings.Builder
	line := func(user, groups string) {
		tok := randomToken(t)
		cp.tokens[user] = tok
		fmt.Fprintf(&lines, "%s,%s,%s", tok, user, user)
		if groups != "" {
			fmt.Fprintf(&lines, ",%s", groups)
		}
		lines.WriteString("\n")
	}
	line(adminUser, "system:masters")
	for _, name := range nodes {
		line(nodeUser(name), "system:nodes")
	}
	line(schedulerUser, "")
	line(controllerManagerUser, "")
	line(kubeProxyUser, "")
	line(placementControllerUser, "system:serviceaccounts,system:serviceaccounts:kube-system")
	line(nodesGroupUser, "system:nodes")
	writeFile(t, filepath.Join(pki, "tokens.csv"), []byte(lines.String()), 0o600)
	cp.adminToken = cp.tokens[adminUser]
	cs, err := kubernetes.NewForConfig(cp.apiClientConfig(cp.adminToken))
	if err != nil {
		t.Fatal(err)
	}
	cp.client = cs
	return cp
}

func (cp *controlPlane) pki() string     { return filepath.Join(cp.dir, "pki") }
func (cp *controlPlane) apiAddr() string { return net.JoinHostPort(cp.host, apiPort) }

// printLogsOnFailure prints the end of the control plane's logs when the
// test failed.
func (cp *controlPlane) printLogsOnFailure() {
	if cp.t.Failed() {
		printTails(cp.t, cp.placementController, cp.controllerManager, cp.scheduler, cp.apiserver, cp.etcd)
	}
}

// dialIn returns a dial function whose connections are made from inside the
// network namespace h: the test reaches the components there without
// anything listening on, or routing to, the machine's own network.
func dialIn(h ns.NetNS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := h.Do(func(ns.NetNS) error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// apiClientConfig returns a client config with token that reaches the API
// server from inside the control plane's network namespace.
func (cp *controlPlane) apiClientConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + cp.apiAddr(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.caPEM},
		Timeout:         15 * time.Second,
		QPS:             50,
		Burst:           100,
		Dial:            dialIn(cp.nsHandle),
	}
}

// writeKubeconfig writes a kubeconfig with user's token at path.
func (cp *controlPlane) writeKubeconfig(path, user string) {
	cp.t.Helper()
	writeFile(cp.t, path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`, cp.apiAddr(), filepath.Join(cp.pki(), "ca.crt"), user, cp.tokens[user], user)), 0o600)
}

// start starts a control-plane component in the control plane's namespace.
func (cp *controlPlane) start(name string, argv ...string) *proc {
	cp.t.Helper()
	return startProc(cp.t, cp.logDir, cp.ns.Path, nil, nil, name, argv...)
}

// startControlPlane starts etcd (unless it runs) and kube-apiserver and
// waits until the API answers.
func (cp *controlPlane) startControlPlane() {
	t := cp.t
	t.Helper()
	if cp.etcd == nil || !cp.etcd.running() {
		cp.etcd = cp.start("etcd", filepath.Join(cp.bins.k8s, "etcd"),
			"--name=e2e", "--data-dir="+filepath.Join(cp.dir, "etcd"),
			"--listen-client-urls=http://"+etcdAddr, "--advertise-client-urls=http://"+etcdAddr,
			"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=e2e=http://127.0.0.1:2380", "--log-level=warn")
		cp.waitEtcd()
	}
	cp.startAPIServer()
}

func (cp *controlPlane) waitEtcd() {
	t := cp.t
	t.Helper()
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: dialIn(cp.nsHandle)}}
	eventually(t, "etcd healthy", time.Minute, 500*time.Millisecond, func() (bool, string) {
		if err := cp.etcd.exited(); err != nil {
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
func (cp *controlPlane) startAPIServer() {
	t := cp.t
	t.Helper()
	pki := cp.pki()
	var extra []string
	if net.ParseIP(cp.host).IsLoopback() {
		// The one-node scenarios serve on the node's loopback, which
		// kube-apiserver 1.37 refuses to publish as the endpoint of the
		// "kubernetes" Service; no test pod uses that Service.
		extra = append(extra, "--endpoint-reconciler-type=none")
	}
	cp.apiserver = cp.start("kube-apiserver", append([]string{filepath.Join(cp.bins.k8s, "kube-apiserver"),
		"--etcd-servers=http://" + etcdAddr,
		"--bind-address=" + cp.host, "--advertise-address=" + cp.host, "--secure-port=" + apiPort,
		"--tls-cert-file=" + filepath.Join(pki, "serving.crt"), "--tls-private-key-file=" + filepath.Join(pki, "serving.key"),
		"--token-auth-file=" + filepath.Join(pki, "tokens.csv"),
		// Real authorization: the kubelet and checkpointd act as
		// system:node:<node>, which the Node authorizer limits to the node's
		// own pods and what they use; NodeRestriction limits what a node may
		// change.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--audit-policy-file=" + cp.auditPolicy(),
		"--audit-log-path=" + cp.auditLogPath(), "--audit-log-format=json", "--audit-log-maxbackup=0",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--cert-dir=" + filepath.Join(cp.dir, "apiserver-certs"),
		"--allow-privileged=true",
		"--v=1"}, extra...)...)
	ctx := context.Background()
	eventually(t, "kube-apiserver ready", 2*time.Minute, time.Second, func() (bool, string) {
		if err := cp.apiserver.exited(); err != nil {
			t.Fatal(err)
		}
		body, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return string(body) == "ok", string(body)
	})
	cp.ensureNamespace("default")
}

// startScheduler starts kube-scheduler as system:kube-scheduler (the RBAC
// bootstrap policy's binding), without leader election or a serving port.
func (cp *controlPlane) startScheduler() {
	cp.t.Helper()
	cp.bins.require(cp.t, "kube-scheduler")
	kc := filepath.Join(cp.dir, "scheduler.kubeconfig")
	cp.writeKubeconfig(kc, schedulerUser)
	cp.scheduler = cp.start("kube-scheduler", filepath.Join(cp.bins.k8s, "kube-scheduler"),
		"--kubeconfig="+kc, "--leader-elect=false", "--secure-port=0", "--v=1")
}

// startControllerManager starts kube-controller-manager with its default
// controllers (ReplicaSet, Deployment, StatefulSet, DaemonSet, garbage
// collector, pod GC, node lifecycle, service accounts, ...; with
// clusterCIDR, the node IPAM controller), as
// system:kube-controller-manager, each controller with its own service
// account's credentials, and waits until the service-account controller
// has made kube-system's default service account.
func (cp *controlPlane) startControllerManager() {
	t := cp.t
	t.Helper()
	cp.bins.require(t, "kube-controller-manager")
	kc := filepath.Join(cp.dir, "controller-manager.kubeconfig")
	cp.writeKubeconfig(kc, controllerManagerUser)
	args := []string{filepath.Join(cp.bins.k8s, "kube-controller-manager"),
		"--kubeconfig=" + kc, "--leader-elect=false", "--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + filepath.Join(cp.pki(), "sa.key"),
		"--root-ca-file=" + filepath.Join(cp.pki(), "ca.crt"),
		"--v=1"}
	if cp.clusterCIDR != "" {
		// A /24 per Node (the default --node-cidr-mask-size), in the
		// order the Nodes register.
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr="+cp.clusterCIDR)
	}
	cp.controllerManager = cp.start("kube-controller-manager", args...)
	cp.waitDefaultServiceAccount("kube-system")
}

// waitDefaultServiceAccount waits until namespace ns has its default
// service account, made by the controller-manager.
func (cp *controlPlane) waitDefaultServiceAccount(ns string) {
	t := cp.t
	t.Helper()
	eventually(t, "service account "+ns+"/default from the controller-manager", 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		if err := cp.controllerManager.exited(); err != nil {
			t.Fatal(err)
		}
		_, err := cp.client.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// ensureNamespace creates namespace ns (if needed) and its default service
// account, which the ServiceAccount admission plugin wants before it admits
// pods (the one-node tests run no controller-manager to create it).
func (cp *controlPlane) ensureNamespace(ns string) {
	t := cp.t
	t.Helper()
	ctx := context.Background()
	eventually(t, "namespace "+ns+" and its default service account", time.Minute, time.Second, func() (bool, string) {
		_, err := cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error()
		}
		_, err = cp.client.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, ""
		}
		return false, err.Error()
	})
}

// auditPolicy writes the API server's audit policy: pod lists and watches,
// and every request of a node or of stickyip-controller on StatefulSets,
// when received, so a test can count the watches and requests a client
// makes; the garbage collector's writes of ConfigMaps, with their body and
// answer, so a test can see what the collector did to an object and
// whether it was let (gcWrites); and stickyip-controller's writes of the
// placement index, with their body, so a test can see that the controller
// acted on a change (controllerShardWrites).
func (cp *controlPlane) auditPolicy() string {
	p := filepath.Join(cp.pki(), "audit-policy.yaml")
	writeFile(cp.t, p, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  verbs: ["watch", "list"]
  resources: [{group: "", resources: ["pods"]}]
  omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
- level: Metadata
  userGroups: ["system:nodes"]
  resources: [{group: "apps", resources: ["statefulsets", "statefulsets/scale"]}]
  omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
- level: Metadata
  users: ["`+placementControllerUser+`"]
  resources: [{group: "apps", resources: ["statefulsets"]}]
  omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
- level: Request
  users: ["system:serviceaccount:kube-system:generic-garbage-collector", "system:kube-controller-manager"]
  verbs: ["patch", "update", "delete"]
  resources: [{group: "", resources: ["configmaps"]}]
  omitStages: ["RequestReceived", "ResponseStarted"]
- level: Request
  users: ["system:serviceaccount:kube-system:stickyip-controller"]
  verbs: ["create", "patch", "update", "delete"]
  resources: [{group: "", resources: ["configmaps"]}]
  omitStages: ["RequestReceived", "ResponseStarted"]
`+cp.auditRules+`- level: None
`), 0o644)
	return p
}

func (cp *controlPlane) auditLogPath() string { return filepath.Join(cp.logDir, "audit.log") }

// checkpointdRequests counts, by verb, the requests on resource that node's
// checkpointd (its credentials, its user agent) made between from and to, as
// the API server received them (the audit policy logs them when received).
func (cp *controlPlane) checkpointdRequests(node, resource string, from, to time.Time) map[string]int {
	cp.t.Helper()
	f, err := os.Open(cp.auditLogPath())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var ev struct {
			Verb      string `json:"verb"`
			Stage     string `json:"stage"`
			UserAgent string `json:"userAgent"`
			User      struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
			Received time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Stage == "RequestReceived" && ev.ObjectRef.Resource == resource && ev.User.Username == "system:node:"+node &&
			strings.HasPrefix(ev.UserAgent, "checkpointd") && !ev.Received.Before(from) && ev.Received.Before(to) {
			out[ev.Verb]++
		}
	}
	return out
}

// stopAPIServer stops the API server (etcd keeps its data and keeps running).
// kube-apiserver 1.37 stops listening and drains within 20 ms of SIGTERM,
// then often does not exit (its log ends at the quota evaluators'
// shutdown): after 10 s it is killed, which an outage is anyway.
func (cp *controlPlane) stopAPIServer() {
	cp.t.Helper()
	cp.apiserver.stop(cp.t, syscall.SIGTERM, 10*time.Second)
	cp.t.Log("kube-apiserver stopped")
}
