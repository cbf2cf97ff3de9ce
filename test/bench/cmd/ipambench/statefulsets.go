package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/test/harness"
)

// Workload 9: what a node pays for the cluster's StatefulSets it runs no
// pod of. The node of workload 8 (110 sticky, checkpointed pods; a real
// checkpointd at its default settings) with its own credentials
// (system:node:<name>), deploy/placement applied as its README says, the
// real stickyip-controller with its ServiceAccount's credentials, and
// 20,000 StatefulSets that no node runs (no controller-manager: no pods)
// whose status is patched in a loop for a minute, between two quiet
// minutes.
const (
	stsNamespace  = "churn"
	stsNodeUser   = "system:node:" + memNode
	stsController = "system:serviceaccount:kube-system:stickyip-controller"
	stsCtlAddr    = "127.0.0.1:9612" // the controller's /readyz and /metrics, in the namespace
	stsProxyAddr  = "127.0.0.1:6444" // checkpointd's way to the API server: the counting proxy
)

// stsAudit logs every request of the node and of the controller when
// received, and its answer; nothing else.
var stsAudit = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  users: ["` + stsNodeUser + `", "` + stsController + `"]
  omitStages: ["ResponseStarted", "Panic"]
- level: None
`

// stsPhase is one minute of workload 9.
type stsPhase struct {
	name     string
	span     time.Duration
	patches  int               // StatefulSet status patches made
	daemons  []memSample       // checkpointd, stickyip-controller
	received int64             // bytes the API server sent checkpointd
	requests [2]map[string]int // by "verb resource": the node's, the controller's
	hwm      [2]int64          // VmHWM at the phase's end
	from, to time.Time         // the phase's span, for the audit log
}

// stsResult is workload 9's figures.
type stsResult struct {
	sets   int
	phases []stsPhase
	// whole run, from the controller's start: the node's requests on
	// StatefulSets, the controller's lists and watches of them.
	nodeSets, ctlSetWatches, ctlSetLists int
}

// workloadStatefulSets is workload 9.
func (b *bench) workloadStatefulSets() error {
	if !b.cfg.has(kindStickyIP) {
		b.report.note("Workload 9 skipped: stickyip not enabled.")
		return nil
	}
	binDir := filepath.Join(b.cfg.output, "k8s", "bin")
	kubectl := filepath.Join(binDir, "kubectl")
	for _, p := range []string{filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "etcd"), kubectl, b.cfg.checkpointdBin, b.cfg.controllerBin} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (make e2e-deps builds etcd, kube-apiserver and kubectl; make build, checkpointd and stickyip-controller)", err)
		}
	}
	repo, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	t, err := b.newTarget(kindStickyIP, "cbr0", memPodCIDR)
	if err != nil {
		return err
	}
	root := filepath.Dir(t.dir)
	n, err := harness.CreateNetns("sts")
	if n != nil {
		defer func() { _ = n.Delete() }()
	}
	if err != nil {
		return err
	}
	if _, err := n.Exec(nil, "ip", "link", "set", "lo", "up"); err != nil {
		return err
	}
	cpDir := filepath.Join(root, "control-plane")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return err
	}
	cp, err := startControlPlaneWith(cpDir, binDir, n, cpOptions{
		users: map[string]string{stsNodeUser: "system:nodes", stsController: "system:serviceaccounts,system:serviceaccounts:kube-system"},
		audit: stsAudit, admission: "NodeRestriction"})
	if err != nil {
		return err
	}
	defer cp.stop()
	if err := applyPlacement(n, kubectl, cp.kubeconfig, filepath.Join(repo, "deploy", "placement")); err != nil {
		return err
	}
	cri, err := harness.StartFakeCRI(filepath.Join(root, "cri.sock"))
	if err != nil {
		return err
	}
	defer cri.Stop()
	if err := b.memNode(cp.client, t, cri); err != nil {
		return err
	}
	confDir := filepath.Join(root, "net.d")
	if err := writeConflist(t, confDir); err != nil {
		return err
	}
	proxy, err := startCountingProxy(n.Path, stsProxyAddr, apiAddr)
	if err != nil {
		return err
	}
	defer proxy.stop()
	nodeKC, ctlKC := filepath.Join(cpDir, "node.kubeconfig"), filepath.Join(cpDir, "controller.kubeconfig")
	if err := errors.Join(cp.writeKubeconfig(nodeKC, stsNodeUser, stsProxyAddr), cp.writeKubeconfig(ctlKC, stsController, apiAddr)); err != nil {
		return err
	}
	began := time.Now()
	ctl, err := startDaemon("stickyip-controller", n.Path, filepath.Join(root, "stickyip-controller.log"), nil, b.cfg.controllerBin,
		"--kubeconfig="+ctlKC, "--listen-address="+stsCtlAddr) // every other flag its default
	if err != nil {
		return err
	}
	defer ctl.stop()
	if err := waitReady(n.Path, ctl); err != nil {
		return err
	}
	start := time.Now()
	cpd, err := startDaemon("checkpointd", n.Path, filepath.Join(root, "checkpointd.log"), nil, b.cfg.checkpointdBin,
		"--node-name", memNode, "--kubeconfig", nodeKC, "--checkpoint-dir", filepath.Join(root, "checkpoints"),
		"--static-pod-dir", filepath.Join(root, "manifests"), "--volume-dir", filepath.Join(root, "volumes"),
		"--cri-endpoint", "unix://"+filepath.Join(root, "cri.sock"), "--data-dir", t.dir, "--cni-conf-dir", confDir,
		"--cni-results-dir", filepath.Join(root, "results"),
		"--allow-namespaces", memNamespace, "--listen-address", "127.0.0.1:9809", "--log-level", "warn") // every other setting its default
	if err != nil {
		return err
	}
	defer cpd.stop()
	if err := harness.Eventually(3*time.Minute, time.Second, func() error {
		return firstErr(cpd.exited(), ctl.exited(), settled(cp.client, filepath.Join(root, "checkpoints")), judged(cp.client))
	}); err != nil {
		return fmt.Errorf("checkpointd did not save and publish the %d pods, or the controller did not index them: %w; checkpointd's log: %s; the controller's: %s",
			maxPods, err, tail(cpd.log, 10), tail(ctl.log, 10))
	}
	b.report.note(fmt.Sprintf("Workload 9: checkpointd (the node's own credentials) saved %d checkpoints and the controller indexed its %d entries %s after it started.",
		maxPods, maxPods, time.Since(start).Round(100*time.Millisecond)))
	sets := b.cfg.statefulSets
	made := time.Now()
	if err := createStatefulSets(cp, n.Path, sets); err != nil {
		return err
	}
	b.report.note(fmt.Sprintf("Workload 9: %d StatefulSets created in %s (no controller-manager runs: no pod of theirs exists).", sets, time.Since(made).Round(100*time.Millisecond)))
	res := &stsResult{sets: sets}
	window := time.Duration(b.cfg.memSeconds) * time.Second
	for _, churn := range []bool{false, true, false} {
		p, err := measurePhase(cp, n.Path, proxy, sets, churn, window, cpd, ctl)
		if err != nil {
			return err
		}
		res.phases = append(res.phases, p)
	}
	all, err := auditCounts(cp.auditLog, began, time.Now())
	if err != nil {
		return err
	}
	for k, v := range all[0] {
		if strings.HasSuffix(k, " statefulsets") || strings.Contains(k, " statefulsets/") {
			res.nodeSets += v
		}
	}
	res.ctlSetWatches, res.ctlSetLists = all[1]["watch statefulsets"], all[1]["list statefulsets"]
	b.report.statefulSets = res
	quiet, busy := res.phases[0], res.phases[1]
	quietCPU := (res.phases[0].daemons[0].cpu + res.phases[2].daemons[0].cpu) / 2
	quietBytes := max(res.phases[0].received, res.phases[2].received)
	b.report.target(targetResult{name: "Workload 9: the node's requests on StatefulSets, whole run", value: float64(res.nodeSets), limit: "= 0",
		pass: res.nodeSets == 0, have: true})
	b.report.target(targetResult{name: fmt.Sprintf("Workload 9: checkpointd's CPU over the churn of %d StatefulSets ÷ over a quiet minute (mean of the two)", sets),
		value: float64(busy.daemons[0].cpu) / float64(max(quietCPU, time.Millisecond)), limit: "≤ 1.5", pass: busy.daemons[0].cpu*2 <= quietCPU*3, have: true})
	// A quiet minute's bytes are a few watch bookmarks and probes (hundreds
	// of bytes): the churn may add a few of those, not an event per patch
	// (a StatefulSet's is about 2 KB).
	b.report.target(targetResult{name: "Workload 9: bytes the API server sent checkpointd over the churn, beyond the larger quiet minute's",
		value: float64(busy.received - quietBytes), limit: "≤ 4096", pass: busy.received-quietBytes <= 4096, have: true})
	b.report.target(targetResult{name: "Workload 9: checkpointd's VmHWM rise over the churn (MB)", value: float64(busy.hwm[0]-quiet.hwm[0]) / 1e6, limit: "≤ 0.5",
		pass: busy.hwm[0]-quiet.hwm[0] <= 500_000, have: true})
	return nil
}

// applyPlacement installs deploy/placement as its README says, with
// kubectl as the administrator: the API, the policies and the controller's
// rights; then, once the dry-run creation of probe.yaml is refused (the
// NodeRecord policy in effect), the nodes' right to write their records.
func applyPlacement(n *harness.Netns, kubectl, kubeconfig, dir string) error {
	run := func(args ...string) (string, error) {
		cmd := exec.Command("nsenter", append([]string{"--net=" + n.Path, "--", kubectl, "--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("apply", "-k", dir); err != nil {
		return fmt.Errorf("kubectl apply -k %s: %w: %s", dir, err, out)
	}
	if err := harness.Eventually(time.Minute, 200*time.Millisecond, func() error {
		out, _ := run("create", "-f", filepath.Join(dir, "probe.yaml"), "--dry-run=server", "-o", "name")
		if strings.Contains(out, "stickyip-node-records") && strings.Contains(out, "denied") {
			return nil
		}
		return fmt.Errorf("the probe not refused yet: %s", out)
	}); err != nil {
		return err
	}
	if out, err := run("apply", "-k", filepath.Join(dir, "nodes")); err != nil {
		return fmt.Errorf("kubectl apply -k %s/nodes: %w: %s", dir, err, out)
	}
	return nil
}

// waitReady waits until the controller answers /readyz.
func waitReady(nsPath string, ctl *daemon) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dialIn(nsPath)}}
	return harness.Eventually(2*time.Minute, 200*time.Millisecond, func() error {
		if err := ctl.exited(); err != nil {
			return err
		}
		resp, err := hc.Get("http://" + stsCtlAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("stickyip-controller /readyz: %s", resp.Status)
		}
		return nil
	})
}

// judged reports whether the controller has judged the node's record and
// indexed every one of its claims.
func judged(c *kubernetes.Clientset) error {
	raw, err := c.Discovery().RESTClient().Get().
		AbsPath("/apis", placementv1.Group, placementv1.Version, placementv1.NodeRecordResource, memNode).DoRaw(context.Background())
	if err != nil {
		return err
	}
	var r placementv1.NodeRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	indexed := 0
	for _, cl := range r.Status.Claims {
		if cl.Indexed {
			indexed++
		}
	}
	if r.Status.ObservedGeneration != r.Generation || indexed < maxPods {
		return fmt.Errorf("the controller has indexed %d claims of generation %d (the record's: %d)", indexed, r.Status.ObservedGeneration, r.Generation)
	}
	return nil
}

// stsClient is an administrator's client without a client-side rate limit
// (qps ≤ 0), or limited to qps requests a second.
func stsClient(cp *controlPlane, nsPath string, qps float32) (*kubernetes.Clientset, error) {
	cfg := &rest.Config{Host: "https://" + apiAddr, BearerToken: cp.tokens["admin"], TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Timeout: 30 * time.Second, QPS: -1, Dial: dialIn(nsPath)}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(qps/10)+1
	}
	return kubernetes.NewForConfig(cfg)
}

// createStatefulSets creates n StatefulSets in stsNamespace, 16 at a time.
func createStatefulSets(cp *controlPlane, nsPath string, n int) error {
	c, err := stsClient(cp, nsPath, 0)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stsNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var next atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := c.AppsV1().StatefulSets(stsNamespace).Create(ctx, stsObject(i), metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("StatefulSet %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// stsObject is the i-th StatefulSet: a database's, sticky, one replica.
func stsObject(i int) *appsv1.StatefulSet {
	name := fmt.Sprintf("db-%05d", i)
	one := int32(1)
	labels := map[string]string{"app": name}
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{reservationAnnotation: "30"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1.2.3",
					Env: []corev1.EnvVar{{Name: "MODE", Value: "replica"}}, Ports: []corev1.ContainerPort{{ContainerPort: 5432}}}}}}}}
}

// measurePhase measures a window of workload 9: checkpointd's and the
// controller's CPU and memory, the bytes the API server sent checkpointd,
// and their requests (the audit log); with churn, the sets' status is
// patched meanwhile, as fast as one write per set a minute allows.
func measurePhase(cp *controlPlane, nsPath string, proxy *countingProxy, sets int, churn bool, window time.Duration, cpd, ctl *daemon) (stsPhase, error) {
	p := stsPhase{name: "quiet"}
	var patches atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	if churn {
		p.name = "status churn"
		c, err := stsClient(cp, nsPath, float32(sets)/60)
		if err != nil {
			return p, err
		}
		var next atomic.Int64
		for range 16 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := next.Add(1)
					body := fmt.Sprintf(`{"status":{"collisionCount":%d}}`, k/int64(sets)+1) // a change in every write: a watch event
					_, err := c.AppsV1().StatefulSets(stsNamespace).Patch(context.Background(), fmt.Sprintf("db-%05d", k%int64(sets)),
						types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
					if err != nil {
						select {
						case errc <- err:
						default:
						}
						return
					}
					patches.Add(1)
				}
			})
		}
	}
	received0 := proxy.received.Load()
	p.from = time.Now()
	samples, err := sampleMemory(int(window/time.Second), cpd, ctl)
	p.to = time.Now()
	close(stop)
	wg.Wait()
	if err != nil {
		return p, err
	}
	select {
	case err := <-errc:
		return p, fmt.Errorf("patching StatefulSets' status: %w", err)
	default:
	}
	p.span, p.patches, p.daemons, p.received = p.to.Sub(p.from), int(patches.Load()), samples, proxy.received.Load()-received0
	for i, d := range []*daemon{cpd, ctl} {
		m, err := d.memory()
		if err != nil {
			return p, err
		}
		p.hwm[i] = m.hwm
	}
	counts, err := auditCounts(cp.auditLog, p.from, p.to)
	if err != nil {
		return p, err
	}
	p.requests = counts
	return p, nil
}

// auditCounts counts, by "verb resource", the requests the node (first)
// and the controller (second) made between from and to, as the API
// server's audit log received them.
func auditCounts(path string, from, to time.Time) ([2]map[string]int, error) {
	out := [2]map[string]int{{}, {}}
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var ev struct {
			Verb, Stage string
			User        struct{ Username string }
			ObjectRef   struct{ Resource, Subresource string }
			RequestURI  string
			Received    time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "RequestReceived" || ev.Received.Before(from) || !ev.Received.Before(to) {
			continue
		}
		res := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		if res == "" { // a path that is no resource's (/readyz)
			res, _, _ = strings.Cut(ev.RequestURI, "?")
		}
		switch ev.User.Username {
		case stsNodeUser:
			out[0][ev.Verb+" "+res]++
		case stsController:
			out[1][ev.Verb+" "+res]++
		}
	}
	return out, sc.Err()
}

// requestsLine renders counts by "verb resource", sorted, "none" when empty.
func requestsLine(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// render writes workload 9's section.
func (r *stsResult) render(w io.Writer) {
	fmt.Fprintln(w, "## A node beside StatefulSets it runs no pod of (workload 9)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The node of workload 8 (110 sticky, checkpointed pods; checkpointd at its default settings) with its own credentials (%s), deploy/placement applied as its README says, "+
		"stickyip-controller with its ServiceAccount's credentials; %d StatefulSets no node runs (no controller-manager: no pods). Three windows: quiet, their status patched in a loop "+
		"(at most one write per set a minute: %.0f/s), quiet again. CPU: the daemon's threads' run time over the window; received: the bytes the API server sent checkpointd "+
		"(a TCP proxy counts them); requests: the API server's audit log, by verb and resource. MB = 10^6 bytes.\n", stsNodeUser, r.sets, float64(r.sets)/60)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| window | status patches | checkpointd CPU | VmRSS median / highest | VmHWM at its end | received | the node's requests | stickyip-controller CPU | its VmRSS median | its requests |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|---|--:|--:|---|")
	for _, p := range r.phases {
		c, k := p.daemons[0], p.daemons[1]
		fmt.Fprintf(w, "| %s, %s | %d (%.0f/s) | %s (%.3f%%) | %s / %s | %s | %d B | %s | %s (%.2f%%) | %s | %s |\n", p.name, p.span.Round(100*time.Millisecond),
			p.patches, float64(p.patches)/max(p.span.Seconds(), 1e-9), c.cpu.Round(time.Millisecond), percent(c.cpu, p.span),
			mb(medianOf(c.rss)), mb(maxOf(c.rss)), mb(p.hwm[0]), p.received, requestsLine(p.requests[0]),
			k.cpu.Round(time.Millisecond), percent(k.cpu, p.span), mb(medianOf(k.rss)), requestsLine(p.requests[1]))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Over the whole run, from the controller's start: the node's requests on StatefulSets %d; the controller's lists of StatefulSets %d, watches %d.\n",
		r.nodeSets, r.ctlSetLists, r.ctlSetWatches)
	fmt.Fprintln(w)
}
