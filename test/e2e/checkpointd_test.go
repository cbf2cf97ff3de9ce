//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
)

const (
	annCheckpoint   = "stickyip.io/checkpoint"
	annCheckpointOf = "stickyip.io/checkpoint-of"
	annReservation  = "io.kubernetes.cri/reserved-ip-duration"
	annIdentity     = "stickyip.io/identity"
	annConfigSource = "kubernetes.io/config.source"

	// checkpointdGrace is checkpointd's grace period in this test: how long
	// the API must be unreachable before a restore, and a parent absent
	// before its checkpoint is released. checkpointdStable is how long the
	// API must answer again before a copy is handed back.
	checkpointdGrace  = 10 * time.Second
	checkpointdStable = 10 * time.Second
	checkpointdAddr   = "127.0.0.1:9477"
)

func (n *node) checkpointDir() string { return filepath.Join(n.dir, "checkpoints") }

// checkpointFile is where checkpointd keeps the record of namespace/name.
func (n *node) checkpointFile(namespace, name string) string {
	return filepath.Join(n.checkpointDir(), namespace+"_"+name+".ckpt")
}

// checkpointdEnv is checkpointd's configuration for this node, as the
// systemd unit passes it (CHECKPOINTD_* variables): the daemon and `checkpointd
// cleanup` read the same.
func (n *node) checkpointdEnv() []string {
	dataDir, confDir, subnetFile := n.stickyipDataDir(), n.cniConfDir(), n.subnetFile()
	if n.shippedPaths { // as the systemd unit's defaults, the same files
		dataDir, confDir, subnetFile = contract.DefaultDataDir, contract.DefaultCNIConfDir, contract.DefaultFlannelSubnetFile
	}
	return []string{
		"CHECKPOINTD_NODE_NAME=" + n.name,
		// The kubelet's own kubeconfig: checkpointd acts as system:node:<name>.
		"CHECKPOINTD_KUBECONFIG=" + n.kubeconfig(),
		"CHECKPOINTD_CHECKPOINT_DIR=" + n.checkpointDir(),
		// The static pod directory comes from the kubelet's config file.
		"CHECKPOINTD_KUBELET_CONFIG=" + filepath.Join(n.dir, "kubelet.yaml"),
		"CHECKPOINTD_CRI_ENDPOINT=unix://" + n.ctd.Address,
		"CHECKPOINTD_VOLUME_DIR=" + filepath.Join(n.runDir(), "stickyip", "checkpointd"),
		"CHECKPOINTD_DATA_DIR=" + dataDir,
		"CHECKPOINTD_CNI_CONF_DIR=" + confDir,
		"CHECKPOINTD_FLANNEL_SUBNET_FILE=" + subnetFile,
		"CHECKPOINTD_ALLOW_NAMESPACES=kube-system",
		"CHECKPOINTD_GRACE_PERIOD=" + checkpointdGrace.String(),
		"CHECKPOINTD_API_STABLE_PERIOD=" + checkpointdStable.String(),
		"CHECKPOINTD_INTERVAL=1s", "CHECKPOINTD_API_PROBE_INTERVAL=1s", "CHECKPOINTD_TIMEOUT=3s",
		"CHECKPOINTD_RESTORE_TIMEOUT=90s",
		"CHECKPOINTD_LISTEN_ADDRESS=" + checkpointdAddr,
		"CHECKPOINTD_LOG_LEVEL=debug",
	}
}

// newCheckpointdNode is newNode for a stickyip node that also runs
// checkpointd (make build), skipping or failing as newNode does when it is
// missing.
func newCheckpointdNode(t testing.TB) *node {
	t.Helper()
	n := newNode(t, nodeOptions{ipam: "stickyip"})
	if _, err := os.Stat(filepath.Join(n.bins.project, "checkpointd")); err != nil {
		missing(t, "%s missing (make build)", filepath.Join(n.bins.project, "checkpointd"))
	}
	return n
}

// runningCheckpointdNode is newCheckpointdNode with everything running:
// the control plane (and namespace kube-system), containerd, a Ready
// kubelet and checkpointd.
func runningCheckpointdNode(t testing.TB) *node {
	t.Helper()
	n := newCheckpointdNode(t)
	n.startControlPlane()
	n.ensureNamespace("kube-system")
	n.startContainerd()
	n.startKubelet(true)
	n.startCheckpointd()
	return n
}

// startCheckpointd starts checkpointd in the node's netns, configured the
// systemd-unit way (environment, the kubelet's kubeconfig, then extra
// CHECKPOINTD_* settings as /etc/default/checkpointd would override them),
// and waits for its /healthz.
func (n *node) startCheckpointd(extra ...string) {
	t := n.t
	t.Helper()
	n.checkpointd = n.start("checkpointd", append(n.checkpointdEnv(), extra...), filepath.Join(n.bins.project, "checkpointd"))
	hc := n.httpClient()
	eventually(t, "checkpointd /healthz", time.Minute, 500*time.Millisecond, func() (bool, string) {
		if err := n.checkpointd.exited(); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get("http://" + checkpointdAddr + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

func (n *node) httpClient() *http.Client {
	return &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: dialIn(n.nsHandle)}}
}

// metricsText is checkpointd's /metrics page.
func (n *node) metricsText() ([]byte, error) {
	resp, err := n.httpClient().Get("http://" + checkpointdAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// metric reads a sample from checkpointd's /metrics: name is the metric
// name with its labels as exposed, e.g. `checkpointd_refusals_total{reason="privileged"}`.
func (n *node) metric(name string) (string, error) {
	body, err := n.metricsText()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("metric %s not exposed", name)
}

// metricLines returns the lines of checkpointd's /metrics whose sample
// name starts with one of prefixes, in order.
func (n *node) metricLines(prefixes ...string) (string, error) {
	body, err := n.metricsText()
	if err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n"), nil
}

// checkpointdPasses is checkpointd's count of the reconcile passes that
// observed the node and acted (checkpointd_reconcile_passes_total).
func (n *node) checkpointdPasses() (int, error) {
	v, err := n.metric("checkpointd_reconcile_passes_total")
	if err != nil {
		return 0, err
	}
	var i int
	_, err = fmt.Sscan(v, &i)
	return i, err
}

// waitPasses waits until checkpointd has run k whole reconcile passes after
// the call (after: what they come after, for the message): its pass counter
// grows by k+1, since the pass under way at the call may have observed the
// node before. A test that decides "nothing happened" waits for it first,
// the proof that checkpointd had its chance to act; the
// interval is 1 s here, the bound leaves room for a loaded machine.
func (n *node) waitPasses(k int, after string) {
	t := n.t
	t.Helper()
	from, err := n.checkpointdPasses()
	if err != nil {
		t.Fatalf("checkpointd's pass counter %s: %v", after, err)
	}
	start := time.Now()
	eventually(t, fmt.Sprintf("%d whole checkpointd passes %s", k, after), 30*time.Second+time.Duration(k)*2*time.Second, 200*time.Millisecond, func() (bool, string) {
		now, err := n.checkpointdPasses()
		if err != nil {
			return false, err.Error()
		}
		return now >= from+k+1, fmt.Sprintf("checkpointd_reconcile_passes_total %d, was %d", now, from)
	})
	t.Logf("checkpointd ran %d whole passes %s (%s)", k, after, time.Since(start).Round(100*time.Millisecond))
}

// metricsAre checks checkpointd metrics against want.
func (n *node) metricsAre(want map[string]string) (bool, string) {
	for name, v := range want {
		got, err := n.metric(name)
		if err != nil {
			return false, err.Error()
		}
		if got != v {
			return false, fmt.Sprintf("%s = %s, want %s", name, got, v)
		}
	}
	return true, ""
}

// staticCopies returns the ready sandboxes of static copies of namespace/name
// that checkpointd restored (annotated checkpoint-of, config source file).
func (n *node) staticCopies(ctx context.Context, namespace, name string) ([]sandbox, error) {
	return n.readySandboxesWhere(ctx, func(p *runtimeapi.PodSandbox) bool {
		return p.Annotations[annCheckpointOf] == namespace+"/"+name && p.Annotations[annConfigSource] == "file"
	})
}

// containersOf returns the containers of a sandbox by name (a container
// that was restarted appears more than once), with state and exit code (CRI).
func (n *node) containersOf(ctx context.Context, sandboxID string) (map[string][]*runtimeapi.ContainerStatus, error) {
	resp, err := n.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: sandboxID}})
	if err != nil {
		return nil, err
	}
	out := map[string][]*runtimeapi.ContainerStatus{}
	for _, c := range resp.Containers {
		st, err := n.cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			return nil, err
		}
		out[c.GetMetadata().GetName()] = append(out[c.GetMetadata().GetName()], st.Status)
	}
	return out, nil
}

// copyServes waits until the static copy of ns/name runs with ip, its init
// container exited 0 and its one main container runs (the test image exits
// 1 when it cannot read its files; a restarted container would appear twice
// in the sandbox).
func (n *node) copyServes(ctx context.Context, ns, name, ip string, timeout time.Duration) {
	n.t.Helper()
	n.copyRuns(ctx, ns, name, ip, timeout, true)
}

// copyRuns waits until one copy sandbox of ns/name runs with ip and its one
// main container runs (and, with init, its init container exited 0); it
// returns the sandbox and main container IDs.
func (n *node) copyRuns(ctx context.Context, ns, name, ip string, timeout time.Duration, init bool) (string, string) {
	n.t.Helper()
	var sb, main string
	eventually(n.t, "static copy of "+ns+"/"+name+" running with "+ip, timeout, time.Second, func() (bool, string) {
		if err := n.checkpointd.exited(); err != nil {
			n.t.Fatal(err)
		}
		sbs, err := n.staticCopies(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 1 || sbs[0].IP != ip {
			return false, fmt.Sprintf("static copies %+v", sbs)
		}
		cs, err := n.containersOf(ctx, sbs[0].ID)
		if err != nil {
			return false, err.Error()
		}
		if c := cs["main"]; len(c) != 1 || c[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return false, fmt.Sprintf("main containers: %v", describe(c))
		}
		if c := cs["init"]; init && (len(c) != 1 || c[0].State != runtimeapi.ContainerState_CONTAINER_EXITED || c[0].ExitCode != 0) {
			return false, fmt.Sprintf("init containers: %v", describe(c))
		}
		sb, main = sbs[0].ID, cs["main"][0].Id
		return true, ""
	})
	return sb, main
}

func describe(cs []*runtimeapi.ContainerStatus) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s exit %d %s", c.State, c.ExitCode, c.Message))
	}
	return fmt.Sprintf("%d: %s", len(cs), strings.Join(out, "; "))
}

// eventTexts returns "reason: message" of the Events on pod ns/name.
func (n *node) eventTexts(ctx context.Context, ns, name string) []string {
	n.t.Helper()
	var out []string
	for _, e := range n.eventList(ctx, ns, fields.OneTermEqualSelector("involvedObject.name", name).String()) {
		out = append(out, e.Reason+": "+e.Message)
	}
	sort.Strings(out)
	return out
}

// checkpointdWatches counts the pod watches checkpointd opened between from
// and to, from the API server's audit log.
func (n *node) checkpointdWatches(from, to time.Time) int {
	return n.checkpointdRequests(nodeName, "pods", from, to)["watch"]
}

// podSpec builds a pod bound to node1 running the harness image: args are
// the test image's checks (see test/harness/pause).
func podSpec(ns, name string, annotations map[string]string, args ...string) *corev1.Pod {
	p := testPod(name, annotations)
	p.Namespace = ns
	p.Spec.Containers[0].Args = args
	return p
}

// TestCheckpointd is checkpoint and restore on real components: a kube-apiserver
// with Node and RBAC authorization and NodeRestriction, checkpointd with the
// node's own credentials, the flannel lease on a tmpfs a power cut clears.
//
// Pods (kube-system is allowed; nothing may carry node-level power):
//
//   - app: opted in; a Secret and a ConfigMap volume, env from a ConfigMap,
//     runAsUser 1000 and fsGroup 2000, an init container; its containers exit
//     1 unless they can read their files;
//   - gone: opted in; deleted through the API while the node is off;
//   - job: opted in, restartPolicy Never: refused (it ran to completion);
//   - priv: opted in, privileged: refused;
//   - team-a/app: opted in, namespace not allowed: refused;
//   - plain: a reservation, no opt-in.
func TestCheckpointd(t *testing.T) {
	n := newCheckpointdNode(t)
	ctx := context.Background()
	n.startControlPlane()
	n.ensureNamespace("kube-system")
	n.ensureNamespace("team-a")
	n.startContainerd()
	n.startKubelet(true)
	watchFrom := time.Now()
	n.startCheckpointd()

	// ---- Objects the pods use, and another node's pod with its own Secret.
	cs := n.client.CoreV1()
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "app-cred", Namespace: "kube-system"}, Data: map[string][]byte{"password": []byte("s3cret"), "unused": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node2-cred", Namespace: "kube-system"}, Data: map[string][]byte{"password": []byte("not-yours")}},
	} {
		if _, err := cs.Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "kube-system"},
		Data: map[string]string{"app.conf": "port=5432\n", "mode": "replica"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := podSpec("kube-system", "on-node2", nil)
	other.Spec.NodeName = node2Name
	other.Spec.Volumes = []corev1.Volume{{Name: "cred", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "node2-cred"}}}}
	n.createPod(other)

	optIn := map[string]string{annCheckpoint: "true", annReservation: "30"}
	app := podSpec("kube-system", "app", optIn, "-read", "/cred/password", "-read", "/config/app.conf", "-env", "MODE=replica")
	uid, fsGroup := int64(1000), int64(2000)
	app.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &fsGroup}
	mode := int32(0o400)
	app.Spec.Volumes = []corev1.Volume{
		{Name: "cred", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-cred", DefaultMode: &mode,
			Items: []corev1.KeyToPath{{Key: "password", Path: "password"}}}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
	}
	app.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cred", MountPath: "/cred"}, {Name: "config", MountPath: "/config"}}
	app.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "mode"}}}}
	app.Spec.InitContainers = []corev1.Container{{Name: "init", Image: harness.PauseImage, Command: []string{"/pause"},
		Args: []string{"-read", "/cred/password", "-exit"}, ImagePullPolicy: corev1.PullNever,
		VolumeMounts: []corev1.VolumeMount{{Name: "cred", MountPath: "/cred"}}}}
	n.createPod(app)
	n.createPod(podSpec("kube-system", "gone", optIn))
	job := podSpec("kube-system", "job", optIn, "-exit")
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	n.createPod(job)
	priv := podSpec("kube-system", "priv", optIn)
	yes := true
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
	n.createPod(priv)
	n.createPod(podSpec("team-a", "app", optIn))
	n.createPod(podSpec("kube-system", "plain", map[string]string{annReservation: "30"}))

	ips := map[string]string{}
	for _, name := range []string{"app", "gone", "priv", "plain"} {
		ips[name] = n.waitPodRunningIn("kube-system", name, 3*time.Minute)
	}
	ips["team-a/app"] = n.waitPodRunningIn("team-a", "app", 2*time.Minute)
	eventually(t, "job completed", 2*time.Minute, time.Second, func() (bool, string) {
		p, err := cs.Pods("kube-system").Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
	})
	t.Logf("running: %v; job completed", ips)

	// ---- Saved: only what the policy allows; the refused get an Event.
	eventually(t, "checkpoints of app and gone saved", time.Minute, time.Second, func() (bool, string) {
		for _, name := range []string{"app", "gone"} {
			if _, err := os.Stat(n.checkpointFile("kube-system", name)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	for _, id := range []string{"kube-system/job", "kube-system/priv", "team-a/app", "kube-system/plain"} {
		ns, name, _ := strings.Cut(id, "/")
		if _, err := os.Stat(n.checkpointFile(ns, name)); !os.IsNotExist(err) {
			t.Errorf("%s has a checkpoint (stat: %v); it must not", id, err)
		}
	}
	eventually(t, "refusal Events", time.Minute, time.Second, func() (bool, string) {
		for id, want := range map[string]string{
			"kube-system/job":  "CheckpointRefused: checkpointd on node node1 will not checkpoint this pod: restartPolicy is Never",
			"kube-system/priv": "CheckpointRefused: checkpointd on node node1 will not checkpoint this pod: it would give a static copy node-level power",
			"team-a/app":       `CheckpointRefused: checkpointd on node node1 will not checkpoint this pod: namespace "team-a" is not in --allow-namespaces`,
		} {
			ns, name, _ := strings.Cut(id, "/")
			if ev := n.eventTexts(ctx, ns, name); !strings.Contains(strings.Join(ev, "\n"), want) {
				return false, fmt.Sprintf("%s events %v lack %q", id, ev, want)
			}
		}
		return true, ""
	})
	if ev := n.eventTexts(ctx, "kube-system", "app"); !strings.Contains(strings.Join(ev, "\n"), "CheckpointSaved") {
		t.Errorf("app events %v lack CheckpointSaved", ev)
	}
	for _, m := range []string{`checkpointd_refusals_total{reason="privileged"}`, `checkpointd_refusals_total{reason="namespace-not-allowed"}`,
		`checkpointd_refusals_total{reason="restart-policy"}`} {
		if v, err := n.metric(m); err != nil || v != "1" {
			t.Errorf("%s = %q, %v; want 1", m, v, err)
		}
	}
	// One processor, unless the environment checkpointd inherits sets
	// GOMAXPROCS: the runtime's wakeups of idle processors were a fifth of
	// the daemon's CPU.
	if v, err := n.metric("go_sched_gomaxprocs_threads"); os.Getenv("GOMAXPROCS") == "" && (err != nil || v != "1") {
		t.Errorf("go_sched_gomaxprocs_threads = %q, %v; want 1", v, err)
	}
	// What lies on disk: only the keys the pod uses.
	if data, err := os.ReadFile(n.checkpointFile("kube-system", "app")); err != nil || strings.Contains(string(data), `"unused"`) {
		t.Errorf("app's checkpoint stores a secret key the pod does not mount (err %v)", err)
	}

	// ---- The node's credentials read only what the node's pods use.
	nodeClient, err := kubernetes.NewForConfig(n.apiClientConfig(n.nodeToken()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodeClient.CoreV1().Secrets("kube-system").Get(ctx, "node2-cred", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node1's credentials read the Secret of a pod bound to node2: err %v, want Forbidden", err)
	}
	if _, err := nodeClient.CoreV1().Secrets("kube-system").Get(ctx, "app-cred", metav1.GetOptions{}); err != nil {
		t.Errorf("node1's credentials cannot read its own pod's Secret: %v", err)
	}
	t.Log("node1's credentials: own pod's Secret readable, node2's pod's Secret Forbidden")

	// ---- One long-lived pod watch, over at least 2 minutes.
	if rest := 2*time.Minute - time.Since(watchFrom); rest > 0 {
		time.Sleep(rest)
	}
	watchTo := time.Now()
	watches := n.checkpointdWatches(watchFrom, watchTo)
	t.Logf("checkpointd opened %d pod watch(es) in %s", watches, watchTo.Sub(watchFrom).Round(time.Second))
	if watches != 1 {
		t.Errorf("checkpointd opened %d pod watches in %s, want 1", watches, watchTo.Sub(watchFrom).Round(time.Second))
	}

	// ---- Outage without a reboot: the kubelet runs its pods; nothing is
	// restored, the completed job is not run again.
	jobSandboxes := n.sandboxCount(ctx, "kube-system", "job")
	n.stopAPIServer()
	apiStopped := time.Now()
	outage := 3*checkpointdGrace + checkpointdStable
	eventually(t, "checkpointd sees the API server away", time.Minute, time.Second, func() (bool, string) {
		return n.metricsAre(map[string]string{"checkpointd_api_reachable": "0"})
	})
	time.Sleep(time.Until(apiStopped.Add(outage))) // the outage's length: the scenario, not a verdict
	// The verdict comes after passes that saw the whole outage: a restore,
	// were there one, is what such a pass does.
	n.waitPasses(3, fmt.Sprintf("after an outage of %s without a reboot", outage))
	if v, _ := n.metric("checkpointd_api_reachable"); v != "0" {
		t.Fatalf("checkpointd_api_reachable %q at the end of the outage, want 0: checkpointd did not see it", v)
	}
	if m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "*")); len(m) > 0 {
		t.Errorf("restored during an outage of %s without a reboot: %v", outage, m)
	}
	if v, _ := n.metric("checkpointd_restores_total"); v != "0" {
		t.Errorf("checkpointd_restores_total %s after an outage without reboot, want 0", v)
	}
	if got := n.sandboxCount(ctx, "kube-system", "job"); got != jobSandboxes {
		t.Errorf("job has %d sandboxes after the outage, %d before: it ran again", got, jobSandboxes)
	}
	t.Logf("outage of %s without a reboot: nothing restored, the completed job not re-run", outage)
	n.startAPIServer()
	eventually(t, "checkpointd sees the API again", time.Minute, time.Second, func() (bool, string) {
		return n.metricsAre(map[string]string{"checkpointd_api_reachable": "1"})
	})

	// ---- Power cut; gone is deleted meanwhile; the node boots without the
	// API server and without flanneld's lease.
	n.powerOff()
	n.deletePodNowIn("kube-system", "gone")
	n.stopAPIServer()
	n.powerOn()
	kubeletStart := n.kubelet.started

	n.copyServes(ctx, "kube-system", "app", ips["app"], 3*time.Minute)
	t.Logf("static copy of app runs with its IP %s, its files readable by uid 1000 (fsGroup 2000), %s after the kubelet started",
		ips["app"], time.Since(kubeletStart).Round(time.Second))
	lease, err := os.ReadFile(n.subnetFile())
	if err != nil || !strings.Contains(string(lease), "FLANNEL_SUBNET="+nodeSubnet) {
		t.Fatalf("flannel lease after the reboot: %q, %v; want the last lease put back by checkpointd", lease, err)
	}
	if w, _ := n.flanneld.written(); !w.IsZero() {
		t.Fatal("the flanneld stand-in wrote its lease while the API server is away")
	}
	if v, _ := n.metric("checkpointd_flannel_lease_restores_total"); v != "1" {
		t.Errorf("checkpointd_flannel_lease_restores_total = %s, want 1", v)
	}
	for _, name := range []string{"job", "priv", "plain"} {
		if m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "*"+name+"*")); len(m) > 0 {
			t.Errorf("%s (refused or not opted in) has a static manifest: %v", name, m)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "*team-a*")); len(m) > 0 {
		t.Errorf("team-a/app (namespace not allowed) has a static manifest: %v", m)
	}
	// gone may be restored: checkpointd cannot know it was deleted.

	// ---- The API server answers again: nothing moves before the stability
	// period; then app is handed back with its IP, gone is removed and its
	// checkpoint released, and flanneld owns its lease again.
	apiStart := time.Now()
	n.startAPIServer()
	n.waitHandedBack(ctx, "kube-system", "app", ips["app"], 3*time.Minute)
	reached := n.logTime(n.checkpointd, apiStart, `msg="API server reachable"`)
	removed := n.logTime(n.checkpointd, apiStart, `msg="static copy removed: API server reachable for the stability period and the parent is bound here`)
	t.Logf("checkpointd saw the API server at %s and handed app back at %s (%s later; stability period %s)",
		reached.Format("15:04:05.000"), removed.Format("15:04:05.000"), removed.Sub(reached).Round(time.Millisecond), checkpointdStable)
	if removed.Sub(reached) < checkpointdStable {
		t.Errorf("copy of app removed %s after checkpointd saw the API server, before the %s stability period", removed.Sub(reached), checkpointdStable)
	}
	back := reached
	n.waitHandedBack(ctx, "kube-system", "app", ips["app"], 3*time.Minute)
	t.Logf("app handed back to its API pod with %s, %s after the API server answered", ips["app"], time.Since(back).Round(time.Second))
	eventually(t, "gone not resurrected, its checkpoint released", 2*time.Minute, 2*time.Second, func() (bool, string) {
		for _, name := range []string{"gone", "gone-" + nodeName} {
			if _, err := cs.Pods("kube-system").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("API pod %s: err %v", name, err)
			}
		}
		if sbs, err := n.staticCopies(ctx, "kube-system", "gone"); err != nil || len(sbs) > 0 {
			return false, fmt.Sprintf("copy of gone: %+v %v", sbs, err)
		}
		if _, err := os.Stat(n.checkpointFile("kube-system", "gone")); !os.IsNotExist(err) {
			return false, fmt.Sprintf("checkpoint of gone still there (stat: %v)", err)
		}
		return true, ""
	})
	for _, e := range n.stickyipList(t) {
		if e.Namespace == "kube-system" && e.Name == "gone" {
			if e.State != "reserved" || e.ExpiresAt == nil || time.Until(*e.ExpiresAt) < 25*time.Minute {
				t.Errorf("gone's IP after its checkpoint was released: %+v; want still reserved for its own 30 minutes", e)
			}
			t.Logf("gone's IP %s stays reserved until %s (its own 30 minutes)", e.IP, e.ExpiresAt.Format(time.RFC3339))
		}
	}
	if got := n.waitPodRunningIn("kube-system", "plain", 2*time.Minute); got != ips["plain"] {
		t.Errorf("plain came back with %s, want its reserved IP %s", got, ips["plain"])
	}
	eventually(t, "flanneld owns its lease again", time.Minute, time.Second, func() (bool, string) {
		w, err := n.flanneld.written()
		if err != nil {
			t.Fatal(err)
		}
		return !w.IsZero(), "stand-in has not written"
	})
	if ev := n.eventTexts(ctx, "kube-system", "app"); !strings.Contains(strings.Join(ev, "\n"), "CheckpointHandedBack") {
		t.Errorf("app events %v lack CheckpointHandedBack", ev)
	}

	// ---- checkpointd stops while a copy runs; the API returns: the parent
	// is not blocked (documented: the kubelet's file check period, 2 s here,
	// 20 s by default, plus the copy's shutdown).
	n.powerOff()
	n.stopAPIServer()
	n.powerOn()
	n.copyServes(ctx, "kube-system", "app", ips["app"], 3*time.Minute)
	n.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
	if m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "stickyip-checkpoint-*")); len(m) > 0 {
		t.Errorf("copies left after checkpointd stopped: %v", m)
	}
	n.startAPIServer()
	stopped := time.Now()
	n.waitHandedBack(ctx, "kube-system", "app", ips["app"], 2*time.Minute)
	unblocked := time.Since(stopped)
	t.Logf("checkpointd stopped with a copy running: the API pod app runs with %s %s after the API server came back", ips["app"], unblocked.Round(time.Second))
	if unblocked > 90*time.Second {
		t.Errorf("parent blocked for %s after checkpointd stopped", unblocked)
	}
	n.startCheckpointd()

	// ---- The node reboots with the API server up and gets another lease:
	// flanneld writes it, nothing is put back, and no address of the old
	// subnet is handed out (plain's reservation is in the old one).
	n.subnet = "10.244.7.1/24"
	newSubnet := netip.MustParsePrefix("10.244.7.0/24")
	n.powerOff()
	n.powerOn()
	eventually(t, "the new lease saved by checkpointd", time.Minute, time.Second, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(n.checkpointDir(), "flannel-subnet.env"))
		return err == nil && strings.Contains(string(b), "FLANNEL_SUBNET=10.244.7.1/24"), fmt.Sprintf("%q %v", b, err)
	})
	for _, name := range []string{"app", "plain", "priv"} {
		ip := n.waitPodRunningIn("kube-system", name, 3*time.Minute)
		if a, err := netip.ParseAddr(ip); err != nil || !newSubnet.Contains(a) {
			t.Errorf("%s got %s after the lease changed to %s; no address of the old subnet may be handed out", name, ip, newSubnet)
		}
	}
	for _, e := range n.stickyipList(t) {
		if a, err := netip.ParseAddr(e.IP); err == nil && e.State == "allocated" && !newSubnet.Contains(a) {
			t.Errorf("after the lease changed, %s/%s holds %s of the old subnet", e.Namespace, e.Name, e.IP)
		}
	}
	if v, _ := n.metric("checkpointd_flannel_lease_restores_total"); v != "0" {
		t.Errorf("checkpointd put a lease back (%s) while the API server was up", v)
	}
	t.Logf("after a reboot onto lease %s: app, plain (reserved %s in the old subnet) and priv got addresses of the new subnet", newSubnet, ips["plain"])

	// checkpointd's pool gauges show what `stickyip status` prints (plain's
	// reservation in the old subnet is outside the ranges in both).
	n.poolGaugesMatchStatus()
}

// poolGaugesMatchStatus waits until checkpointd's IPAM gauges of every
// stickyip network equal the totals `stickyip status --json` prints.
func (n *node) poolGaugesMatchStatus() {
	t := n.t
	t.Helper()
	var shown string
	eventually(t, "checkpointd's pool gauges equal stickyip status", time.Minute, time.Second, func() (bool, string) {
		o := (&harness.Plugin{Path: filepath.Join(n.bins.project, "stickyip")}).Tool("status", "--cni-conf-dir", n.cniConfDir(), "--json")
		var pools []admin.PoolStatus
		if err := json.Unmarshal(o.Stdout, &pools); err != nil || o.ExitCode != 0 || len(pools) == 0 {
			return false, fmt.Sprintf("stickyip status: %s (%v)", o.Describe(), err)
		}
		want := map[string]string{}
		for _, p := range pools {
			var a, r, c, f int
			for _, s := range p.Sets {
				a, r, c, f = a+s.Allocated, r+s.Reserved, c+s.Cooling, f+s.Free
			}
			for metric, v := range map[string]int{"allocations": a, "reservations": r, "cooling_ips": c, "free_ips": f} {
				want[fmt.Sprintf("checkpointd_ipam_%s{network=%q}", metric, p.Network)] = fmt.Sprint(v)
			}
		}
		shown = fmt.Sprint(want)
		return n.metricsAre(want)
	})
	t.Logf("checkpointd's pool gauges equal stickyip status: %s", shown)
}

// logTime returns the time of the first line of p's log at or after from
// that contains substr (slog's time=... field); the test fails without one.
func (n *node) logTime(p *proc, from time.Time, substr string) time.Time {
	n.t.Helper()
	at, ok := n.findLogTime(p, from, substr)
	if !ok {
		n.t.Fatalf("%s: no line with %q after %s", p.logPath, substr, from.Format(time.RFC3339))
	}
	return at
}

// waitLogTime is logTime for a line that may come later: it waits up to
// timeout for it.
func (n *node) waitLogTime(p *proc, from time.Time, substr string, timeout time.Duration) time.Time {
	n.t.Helper()
	var at time.Time
	eventually(n.t, fmt.Sprintf("%s: a line with %q after %s", p.logPath, substr, from.Format(time.RFC3339)), timeout, 500*time.Millisecond, func() (bool, string) {
		var ok bool
		at, ok = n.findLogTime(p, from, substr)
		return ok, "not logged yet"
	})
	return at
}

// findLogTime returns the time of the first line of p's log at or after
// from that contains substr.
func (n *node) findLogTime(p *proc, from time.Time, substr string) (time.Time, bool) {
	n.t.Helper()
	f, err := os.Open(p.logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		ts, _, ok := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if !ok || !strings.Contains(line, substr) {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && !at.Before(from) {
			return at, true
		}
	}
	return time.Time{}, false
}

// waitHandedBack waits until no copy of ns/name runs and its API pod runs
// with ip (API and runtime agree).
func (n *node) waitHandedBack(ctx context.Context, ns, name, ip string, timeout time.Duration) {
	n.t.Helper()
	eventually(n.t, ns+"/"+name+" handed back with "+ip, timeout, time.Second, func() (bool, string) {
		sbs, err := n.staticCopies(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 0 {
			return false, fmt.Sprintf("static copy still running: %+v", sbs)
		}
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != ip {
			return false, fmt.Sprintf("API pod: phase %s IP %q", p.Status.Phase, p.Status.PodIP)
		}
		api, err := n.readySandboxes(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		if len(api) != 1 || api[0].UID != string(p.UID) || api[0].IP != ip {
			return false, fmt.Sprintf("runtime sandboxes: %+v", api)
		}
		return true, ""
	})
}

// sandboxCount counts the sandboxes (any state) of ns/name.
func (n *node) sandboxCount(ctx context.Context, ns, name string) int {
	n.t.Helper()
	pods, err := n.cri.ListPods(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	c := 0
	for _, p := range pods {
		if p.GetMetadata().GetNamespace() == ns && p.GetMetadata().GetName() == name {
			c++
		}
	}
	return c
}
