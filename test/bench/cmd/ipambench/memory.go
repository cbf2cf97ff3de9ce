package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/test/harness"
)

// The node of workload 8: its name, its pod CIDR (a range of flannel's
// network, 10.244.0.0/16), and the namespace of its pods.
const (
	memNode      = "bench-node"
	memPodCIDR   = "10.244.7.0/24"
	memNamespace = "bench"
)

// memSample is one process's resident memory through workload 8.
type memSample struct {
	process string
	binary  int64         // bytes of its binary
	rss     []int64       // VmRSS, once a second once the node is settled
	anon    []int64       // its RssAnon (heap, stacks)
	file    []int64       // its RssFile (the binary's pages)
	hwm     int64         // VmHWM at the end: the peak, start-up included
	cpu     time.Duration // CPU time (user and system) used while sampled
	span    time.Duration // how long it was sampled
}

// workloadMemory is workload 8: checkpointd's and flanneld's resident
// memory on one node with the kubelet's default 110 pods, each opted in to
// checkpointing and sticky (a reservation annotation), so that checkpointd
// saves 110 checkpoints (each reading a ConfigMap the pod mounts) and
// publishes 110 placement entries. A real etcd and kube-apiserver hold the
// Node and the pods; flanneld v0.28.10 (--kube-subnet-mgr, vxlan) leases
// the Node's pod CIDR; the runtime is a CRI server of the driver's listing
// the 110 sandboxes, whose addresses the plugin allocated. Both daemons
// run in a network namespace of the driver's, as the node's.
func (b *bench) workloadMemory() error {
	if !b.cfg.has(kindStickyIP) {
		b.report.note("Workload 8 skipped: stickyip not enabled.")
		return nil
	}
	binDir, flanneld := filepath.Join(b.cfg.output, "k8s", "bin"), filepath.Join(b.cfg.output, "flannel", "bin", "flanneld")
	for _, p := range []string{filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "etcd"), flanneld, b.cfg.checkpointdBin} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (make e2e-deps builds etcd, kube-apiserver and flanneld; make build, checkpointd)", err)
		}
	}
	t, err := b.newTarget(kindStickyIP, "cbr0", memPodCIDR)
	if err != nil {
		return err
	}
	root := filepath.Dir(t.dir)
	n, err := harness.CreateNetns("mem")
	if n != nil {
		defer func() { _ = n.Delete() }()
	}
	if err != nil {
		return err
	}
	// flanneld wants an interface with an address: the node's eth0, one end
	// of a veth pair whose other end stays in the namespace too.
	for _, args := range [][]string{{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"}, {"addr", "add", "10.200.0.10/24", "dev", "eth0"},
		{"link", "set", "eth0-peer", "up"}, {"link", "set", "eth0", "up"}, {"route", "add", "default", "dev", "eth0"}} {
		if _, err := n.Exec(nil, "ip", args...); err != nil {
			return err
		}
	}
	cpDir := filepath.Join(root, "control-plane")
	if err := os.MkdirAll(cpDir, 0o700); err != nil {
		return err
	}
	cp, err := startControlPlane(cpDir, binDir, n)
	if err != nil {
		return err
	}
	defer cp.stop()
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
	fl, err := startFlanneld(root, n, cp.kubeconfig, flanneld)
	if err != nil {
		return err
	}
	defer fl.stop()
	cpd, err := startDaemon("checkpointd", n.Path, filepath.Join(root, "checkpointd.log"), nil, b.cfg.checkpointdBin,
		"--node-name", memNode, "--kubeconfig", cp.kubeconfig, "--checkpoint-dir", filepath.Join(root, "checkpoints"),
		"--static-pod-dir", filepath.Join(root, "manifests"), "--volume-dir", filepath.Join(root, "volumes"),
		"--cri-endpoint", "unix://"+filepath.Join(root, "cri.sock"), "--data-dir", t.dir, "--cni-conf-dir", confDir,
		"--cni-results-dir", filepath.Join(root, "results"), "--flannel-subnet-file", filepath.Join(root, "subnet.env"),
		"--allow-namespaces", memNamespace, "--listen-address", "127.0.0.1:9809", "--log-level", "warn") // every other setting its default
	if err != nil {
		return err
	}
	defer cpd.stop()
	start := time.Now()
	if err := harness.Eventually(3*time.Minute, time.Second, func() error {
		return firstErr(cpd.exited(), fl.exited(), settled(cp.client, filepath.Join(root, "checkpoints")))
	}); err != nil {
		return fmt.Errorf("checkpointd did not save and publish the %d pods: %w; its log: %s", maxPods, err, tail(cpd.log, 10))
	}
	b.report.note(fmt.Sprintf("Workload 8: checkpointd saved %d checkpoints and published %d placement entries %s after it started.",
		maxPods, maxPods, time.Since(start).Round(100*time.Millisecond)))
	samples, err := sampleMemory(b.cfg.memSeconds, cpd, fl)
	if err != nil {
		return err
	}
	churn, err := b.churn(cp.client, t, cri, filepath.Join(root, "checkpoints"), b.cfg.churnPods, time.Duration(b.cfg.memSeconds)*time.Second, cpd, fl)
	if err != nil {
		return fmt.Errorf("pod churn: %w; checkpointd's log: %s", err, tail(cpd.log, 10))
	}
	b.report.churn = &churn
	if hwm, err := cpd.memory(); err == nil {
		samples[0].hwm = hwm.hwm // the peak, churn included
	}
	if hwm, err := fl.memory(); err == nil {
		samples[1].hwm = hwm.hwm
	}
	b.report.note("Workload 8, checkpointd's Go memory at the end (its /metrics): " + goMemory(n.Path, "127.0.0.1:9809"))
	for i, bin := range []string{b.cfg.checkpointdBin, flanneld} {
		if fi, err := os.Stat(bin); err == nil {
			samples[i].binary = fi.Size()
		}
	}
	b.report.memory = samples
	c := samples[0]
	for _, tr := range []struct {
		name  string
		value int64
		limit int64
	}{{"checkpointd binary, stripped (MB)", c.binary, 25_000_000},
		{"checkpointd VmHWM at 110 pods: peak, start-up and churn included (MB)", c.hwm, 30_000_000}} {
		b.report.target(targetResult{name: tr.name, value: float64(tr.value) / 1e6, limit: fmt.Sprintf("≤ %.1f", float64(tr.limit)/1e6),
			pass: tr.value <= tr.limit, have: tr.value > 0})
	}
	idle := [2]float64{percent(samples[0].cpu, samples[0].span), percent(samples[1].cpu, samples[1].span)}
	busy := [2]float64{percent(churn.cpu[0], churn.span), percent(churn.cpu[1], churn.span)}
	b.report.target(targetResult{name: "checkpointd CPU idle at 110 pods, default settings (% of a CPU; the limit is flanneld's in the same run)",
		value: idle[0], limit: fmt.Sprintf("≤ %.2f", idle[1]), pass: samples[0].cpu <= samples[1].cpu, have: true})
	b.report.target(targetResult{name: fmt.Sprintf("checkpointd CPU during a churn of %d pods (%% of a CPU; the limit is flanneld's in the same run)", churn.pods),
		value: busy[0], limit: fmt.Sprintf("≤ %.2f", busy[1]), pass: churn.cpu[0] <= churn.cpu[1], have: true})
	return nil
}

// memNode puts the node's 110 pods in place: the Node and, in namespace
// memNamespace, a ConfigMap they all mount and the pods bound to the Node;
// each pod's address is allocated by the plugin (as a runtime's ADD), its
// sandbox listed by cri, and its status set Running with that address (as
// the kubelet would).
func (b *bench) memNode(c *kubernetes.Clientset, t *target, cri *harness.FakeCRI) error {
	ctx := context.Background()
	// Annotated and labelled as a kubelet registers it (flanneld writes its
	// lease in the Node's annotations, which it takes to exist).
	if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: memNode,
		Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}, Labels: map[string]string{"kubernetes.io/hostname": memNode}},
		Spec: corev1.NodeSpec{PodCIDR: memPodCIDR, PodCIDRs: []string{memPodCIDR}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := installPlacementAPI(c); err != nil {
		return err
	}
	if _, err := c.CoreV1().ServiceAccounts(memNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	data := map[string]string{}
	for i := range 8 {
		data[fmt.Sprintf("key%d", i)] = strings.Repeat("v", 256)
	}
	if _, err := c.CoreV1().ConfigMaps(memNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: data}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range maxPods {
		if _, err := b.addMemPod(c, t, cri, "mem", i); err != nil {
			return err
		}
	}
	return nil
}

// addMemPod creates pod tag-i of the node as the kubelet and the runtime
// would: the API object (opted in to checkpointing, sticky, mounting the
// ConfigMap), its address allocated by the plugin (ADD), its sandbox
// listed, its status Running with that address. It returns the pod and
// the time its status became Running.
func (b *bench) addMemPod(c *kubernetes.Clientset, t *target, cri *harness.FakeCRI, tag string, i int) (pod, error) {
	ctx := context.Background()
	no := false
	p := memPod(tag, i)
	obj, err := c.CoreV1().Pods(memNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Annotations: maps.Clone(p.annotations), Labels: map[string]string{"app": "bench"}},
		Spec: corev1.PodSpec{NodeName: memNode, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return p, err
	}
	p.uid = string(obj.UID)
	if err := t.prepare(p); err != nil {
		return p, err
	}
	r := t.call("ADD", p)
	if r.err != nil {
		return p, r.err
	}
	sb := harness.FakeSandbox{ID: p.containerID, Namespace: p.namespace, Name: p.name, UID: p.uid, Annotations: maps.Clone(p.annotations), Netns: t.netnsPath(p)}
	for _, ip := range r.ips {
		sb.IPs = append(sb.IPs, ip.String()+"/24")
	}
	cri.Add(sb)
	obj.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: r.ips[0].String(), PodIPs: []corev1.PodIP{{IP: r.ips[0].String()}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}, StartTime: &metav1.Time{Time: time.Now()}}
	if _, err := c.CoreV1().Pods(memNamespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return p, err
	}
	return p, nil
}

// memPod is pod tag-i of the node: sticky (a 30-minute reservation) and
// opted in to checkpointing.
func memPod(tag string, i int) pod {
	p := newPod(tag, i)
	p.namespace = memNamespace
	p.annotations[reservationAnnotation] = "30"
	p.annotations[contract.AnnotationCheckpoint] = "true"
	return p
}

// removeMemPod deletes pod p as the kubelet and the runtime would: the
// sandbox stopped and removed (its DEL, which leaves its reservation), the
// API object gone.
func removeMemPod(c *kubernetes.Clientset, t *target, cri *harness.FakeCRI, p pod) error {
	if r := t.call("DEL", p); r.err != nil {
		return r.err
	}
	cri.Remove(p.containerID)
	zero := int64(0)
	return c.CoreV1().Pods(memNamespace).Delete(context.Background(), p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// startFlanneld starts flanneld as kube-flannel.yml does (--kube-subnet-mgr,
// --ip-masq, vxlan) for the node, and waits for its lease.
func startFlanneld(root string, n *harness.Netns, kubeconfig, bin string) (*daemon, error) {
	netConf := filepath.Join(root, "net-conf.json")
	if err := os.WriteFile(netConf, []byte(`{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}`), 0o644); err != nil {
		return nil, err
	}
	subnet := filepath.Join(root, "subnet.env")
	fl, err := startDaemon("flanneld", n.Path, filepath.Join(root, "flanneld.log"), []string{"NODE_NAME=" + memNode}, bin,
		"--kube-subnet-mgr", "--kubeconfig-file="+kubeconfig, "--net-config-path="+netConf, "--subnet-file="+subnet, "--iface=eth0", "--ip-masq")
	if err != nil {
		return nil, err
	}
	if err := harness.Eventually(2*time.Minute, 500*time.Millisecond, func() error {
		if err := fl.exited(); err != nil {
			return err
		}
		_, err := os.Stat(subnet)
		return err
	}); err != nil {
		fl.stop()
		return nil, fmt.Errorf("flanneld wrote no lease: %w: %s", err, tail(fl.log, 10))
	}
	return fl, nil
}

// settled reports whether checkpointd has saved every pod and published
// each one's placement entry.
func settled(c *kubernetes.Clientset, checkpoints string) error {
	ents, _ := os.ReadDir(checkpoints)
	saved := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), checkpoint.Suffix) {
			saved++
		}
	}
	pods, err := publishedPods(c)
	if err != nil {
		return err
	}
	published := len(pods)
	if saved < maxPods || published < maxPods {
		return fmt.Errorf("%d checkpoints saved, %d placement entries published, want %d each", saved, published, maxPods)
	}
	// The Events of the saves are posted at the API client's pace, after
	// the saves: the node is idle once they are all there.
	evs, err := c.CoreV1().Events(memNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reconcile.EventSaved})
	if err != nil {
		return err
	}
	if len(evs.Items) < maxPods {
		return fmt.Errorf("%d %s Events posted, want %d", len(evs.Items), reconcile.EventSaved, maxPods)
	}
	return nil
}

// sampleMemory reads the daemons' resident memory once a second for
// seconds, then their peak and the CPU time they used meanwhile (what a
// tighter heap costs in garbage collection shows there).
func sampleMemory(seconds int, ds ...*daemon) ([]memSample, error) {
	out := make([]memSample, len(ds))
	cpu0 := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i].process = d.name
		c, err := d.cpu()
		if err != nil {
			return nil, err
		}
		cpu0[i] = c
	}
	start := time.Now()
	for s := 0; s <= seconds; s++ {
		if s > 0 {
			time.Sleep(time.Second)
		}
		for i, d := range ds {
			if err := d.exited(); err != nil {
				return nil, err
			}
			m, err := d.memory()
			if err != nil {
				return nil, err
			}
			out[i].rss = append(out[i].rss, m.rss)
			out[i].anon = append(out[i].anon, m.anon)
			out[i].file = append(out[i].file, m.file)
			out[i].hwm = m.hwm
		}
	}
	for i, d := range ds {
		c, err := d.cpu()
		if err != nil {
			return nil, err
		}
		out[i].cpu, out[i].span = c-cpu0[i], time.Since(start)
	}
	return out, nil
}

// goMemory returns the Go runtime's memory figures of the daemon whose
// /metrics are at addr in the namespace nsPath, in MB.
func goMemory(nsPath, addr string) string {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(nsPath)}}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !slices.Contains([]string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
			"go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_memstats_next_gc_bytes"}, f[0]) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out = append(out, fmt.Sprintf("%s %.1f", strings.TrimSuffix(strings.TrimPrefix(f[0], "go_memstats_"), "_bytes"), v/1e6))
		}
	}
	return strings.Join(out, ", ")
}

// medianOf returns the median of xs (0 when empty).
func medianOf(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// maxOf returns the largest of xs (0 when empty).
func maxOf(xs []int64) int64 {
	var m int64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
