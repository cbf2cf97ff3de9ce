//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// echoPort is where the test pods answer pings (the harness image's -serve).
const echoPort = "7070"

// Real flannel on the two-node cluster, as steps of TestCluster:
//
//  1. kubeFlannelInstalled: the nodes are NotReady until kube-flannel's pods
//     have installed the CNI plugin and config (newFlannelCluster), then
//     Ready: each node's conflist is the ConfigMap's cni-conf.json, its
//     flannel plugin the one of the offline image, its subnet.env
//     flanneld's lease of the Node's podCIDR (vxlan: MTU 1450), its Node
//     annotated by flanneld.
//  2. stickyipNodes: the documented switch to stickyip (the ConfigMap patch,
//     the rollout restart): a pod on each node gets an address of its node's
//     podCIDR from stickyip.
//  3. acrossBackends: the two pods exchange a ping both ways across the
//     nodes over vxlan (the route to the other node's subnet through
//     flannel.1, whose counters grow), then, after net-conf.json's Backend
//     is patched to host-gw and kube-flannel restarted, over host-gw (a
//     route through the other node's address on eth0; flannel.1 carries
//     nothing).
//  4. flanneldWithoutAPI: flanneld at boot with the API server away: node2's
//     subnet.env gone (as a reboot empties /run; checkpointd, which would
//     put its saved lease back, stopped) and its flanneld restarted while
//     the API server is down: flanneld exits, the kubelet restarts it,
//     nothing is written; once the API server is back flanneld writes the
//     same lease.

// kubeFlannelInstalled checks what kube-flannel.yml installed on each node
// (step 1 above).
func (c *cluster) kubeFlannelInstalled() {
	t := c.t
	n1, n2 := c.nodes[0], c.nodes[1]
	cfg := c.kubeFlannelConfig()
	if cfg["cni-conf.json"] != c.kubeFlannelShipped["cni-conf.json"] {
		t.Fatalf("kube-flannel's cni-conf.json is not the one kube-flannel.yml ships:\n%s", cfg["cni-conf.json"])
	}
	plugin, err := os.ReadFile(filepath.Join(harness.UpstreamBinDir(), "flannel"))
	if err != nil {
		t.Fatal(err)
	}
	cidrs := map[string]string{}
	for _, n := range c.nodes {
		if got, err := n.conflist(); err != nil || got != cfg["cni-conf.json"] {
			t.Fatalf("%s: installed conflist (%v):\n%s\nwant kube-flannel's cni-conf.json:\n%s", n.name, err, got, cfg["cni-conf.json"])
		}
		p := filepath.Join(n.cniBinDir, "flannel")
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %s: %v, %v: want the plugin install-cni-plugin copied", n.name, p, fi, err)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.Equal(b, plugin) {
			t.Fatalf("%s: %s is not the image's flannel plugin (%v)", n.name, p, err)
		}
		l, err := n.lease()
		if err != nil {
			t.Fatal(err)
		}
		if l.MTU != "1450" || l.IPMasq != "true" {
			t.Fatalf("%s: subnet.env for vxlan with --ip-masq:\n%s", n.name, l.raw)
		}
		no, err := c.client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if no.Annotations[annFlannelBackend] != "vxlan" || no.Annotations[annFlannelPublicIP] != n.ip {
			t.Fatalf("%s: flannel annotations %v", n.name, no.Annotations)
		}
		cidrs[n.name] = no.Spec.PodCIDR
		t.Logf("%s: podCIDR %s, flanneld's subnet.env:\n%s", n.name, no.Spec.PodCIDR, l.raw)
	}
	if cidrs[n1.name] == cidrs[n2.name] {
		t.Fatalf("both nodes have podCIDR %s", cidrs[n1.name])
	}
}

// echoPods are a pod per node serving pings (the harness image's -serve
// on echoPort), and their IPs, by node name.
type echoPods struct {
	pods map[string]*corev1.Pod
	ips  map[string]string
}

// stickyipNodes puts stickyip on the nodes as an operator who does not use
// deploy/install does: the plugin (make build's) copied into each node's
// CNI bin dir, checkpointd started as its systemd unit runs it, then the
// documented switch (step 2 above). A pod on each node, serving pings, gets
// an address of its node's podCIDR from stickyip; the pods are returned.
func (c *cluster) stickyipNodes() echoPods {
	t := c.t
	plugin, err := os.ReadFile(filepath.Join(c.bins.project, "stickyip"))
	if err != nil {
		missing(t, "%s missing (make build): %v", filepath.Join(c.bins.project, "stickyip"), err)
	}
	if _, err := os.Stat(filepath.Join(c.bins.project, "checkpointd")); err != nil {
		missing(t, "%s missing (make build)", filepath.Join(c.bins.project, "checkpointd"))
	}
	for _, n := range c.nodes {
		// As make install does: a complete file renamed into place.
		tmp := filepath.Join(n.cniBinDir, ".stickyip.new")
		writeFile(t, tmp, plugin, 0o755)
		if err := os.Rename(tmp, filepath.Join(n.cniBinDir, "stickyip")); err != nil {
			t.Fatal(err)
		}
		n.startCheckpointd()
	}
	switchStart := time.Now()
	c.useStickyip()
	t.Logf("switch to stickyip (patch, rollout restart, conflists): %s", time.Since(switchStart).Round(100*time.Millisecond))
	e := echoPods{pods: map[string]*corev1.Pod{}, ips: map[string]string{}}
	for _, n := range c.nodes {
		p := n.podOn("echo-"+n.name, nil)
		p.Spec.Containers[0].Args = []string{"-serve", ":" + echoPort}
		n.createPod(p)
		e.pods[n.name] = p
	}
	for _, n := range c.nodes {
		ip := n.waitAPIPodRunning(e.pods[n.name].Name, 2*time.Minute)
		if !n.inSubnet(ip) {
			t.Fatalf("%s: pod %s got %s, outside its podCIDR %s", n.name, e.pods[n.name].Name, ip, n.subnet)
		}
		if got := ipOf(n.stickyipList(t), "default/"+e.pods[n.name].Name); got != ip {
			t.Fatalf("%s: stickyip list has default/%s at %q, the API %s", n.name, e.pods[n.name].Name, got, ip)
		}
		e.ips[n.name] = ip
		t.Logf("%s: default/%s got %s from stickyip", n.name, e.pods[n.name].Name, ip)
	}
	return e
}

// acrossBackends runs the pings across the nodes over vxlan, switches
// kube-flannel to host-gw and runs them again (step 3 above), then deletes
// the pods.
func (c *cluster) acrossBackends(e echoPods) {
	t := c.t
	vxlan := c.exchangeAcross(e.pods, e.ips, "vxlan")
	reconfStart := time.Now()
	c.setFlannelBackend("host-gw")
	reconf := time.Since(reconfStart)
	for _, n := range c.nodes {
		l, err := n.lease()
		if err != nil {
			t.Fatal(err)
		}
		if l.MTU != "1500" || l.Subnet.String() != n.subnet {
			t.Fatalf("%s: subnet.env for host-gw (eth0's MTU, the same lease %s):\n%s", n.name, n.subnet, l.raw)
		}
	}
	hostgw := c.exchangeAcross(e.pods, e.ips, "host-gw")
	for _, n := range c.nodes {
		n.deletePodGracefully(e.pods[n.name].Name, 2*time.Minute)
	}
	t.Logf("figures: vxlan exchange %s; backend → host-gw (patch, rollout restart, announced, leases) %s; host-gw exchange %s",
		vxlan.Round(time.Millisecond), reconf.Round(100*time.Millisecond), hostgw.Round(time.Millisecond))
}

// exchangeAcross pings each node's pod from the other node's pod (the
// harness image's -serve/-dial, one TCP exchange each way) and checks the
// path the backend gives: for vxlan each node routes the other's pod
// subnet through flannel.1 and flannel.1 sends the packets, for host-gw
// through the other node's eth0 address and flannel.1 sends none. It
// returns how long the two exchanges took.
func (c *cluster) exchangeAcross(pods map[string]*corev1.Pod, ips map[string]string, backend string) time.Duration {
	t := c.t
	t.Helper()
	n1, n2 := c.nodes[0], c.nodes[1]
	for _, pair := range [][2]*node{{n1, n2}, {n2, n1}} {
		n, other := pair[0], pair[1]
		route := n.routeTo(other.podCIDRMasked())
		want := "dev flannel.1"
		if backend == "host-gw" {
			want = "via " + other.ip + " dev eth0"
		}
		if !strings.Contains(route, want) {
			t.Fatalf("%s (%s): route to %s's pod subnet %q, want %q", n.name, backend, other.name, route, want)
		}
	}
	tx := map[string]uint64{}
	for _, n := range c.nodes {
		tx[n.name] = n.txPackets("flannel.1")
	}
	start := time.Now()
	for _, pair := range [][2]*node{{n1, n2}, {n2, n1}} {
		from, to := pods[pair[0].name], pods[pair[1].name]
		addr := ips[pair[1].name] + ":" + echoPort
		var reply string
		var err error
		// The first packets after a backend change may meet a route or
		// neighbour entry still being written: a few bounded tries.
		for i := 0; i < 5; i++ {
			if reply, err = c.pingPod(from, addr); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Fatalf("%s: %s (%s) → %s (%s): %v", backend, from.Name, pair[0].name, to.Name, addr, err)
		}
		if !strings.Contains(reply, "pong from "+to.Name+": ping from "+from.Name) {
			t.Fatalf("%s: %s → %s answered %q", backend, from.Name, addr, reply)
		}
		t.Logf("%s: %s on %s → %s on %s: %s", backend, from.Name, pair[0].name, to.Name, pair[1].name, reply)
	}
	took := time.Since(start)
	for _, n := range c.nodes {
		sent := n.txPackets("flannel.1") - tx[n.name]
		switch {
		case backend == "vxlan" && sent == 0:
			t.Fatalf("%s: flannel.1 sent nothing during the vxlan exchange", n.name)
		case backend == "host-gw" && sent != 0:
			t.Fatalf("%s: flannel.1 sent %d packets during the host-gw exchange", n.name, sent)
		}
	}
	return took
}

// podCIDRMasked is the node's pod subnet (its lease, masked), as routes name it.
func (n *node) podCIDRMasked() string {
	return netip.MustParsePrefix(n.subnet).Masked().String()
}

// flanneldWithoutAPI restarts flanneld on n as at a boot with the API
// server away: n's checkpointd stopped (it would put the saved lease back:
// flanneld alone is observed here), the API server killed, the node's
// subnet.env removed (a reboot empties /run), flanneld's container stopped
// (CRI; the kubelet starts it again). It checks that nothing writes subnet.env while the API
// server is away and that flanneld exits with an error, then starts the API
// server and waits for flanneld to write the same lease; n's checkpointd,
// if it ran, is started again.
func (c *cluster) flanneldWithoutAPI(n *node) {
	t := c.t
	ctx := context.Background()
	before, err := n.lease()
	if err != nil {
		t.Fatal(err)
	}
	pod := c.flannelPod(n)
	var id string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "kube-flannel" {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("%s: no kube-flannel container in %+v", n.name, pod.Status.ContainerStatuses)
	}
	first, _ := c.flanneldAttempts(n, pod, 0)
	ran := n.checkpointd != nil
	if ran {
		n.checkpointd.stop(t, syscall.SIGTERM, 10*time.Second)
		n.checkpointd = nil
	}
	// Killed: a graceful stop can hang 30 s, and an API server that is
	// away is all this needs.
	c.apiserver.stop(t, syscall.SIGKILL, 10*time.Second)
	if err := os.Remove(n.subnetFile()); err != nil {
		t.Fatal(err)
	}
	if _, err := n.cri.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
		t.Fatal(err)
	}
	// The kubelet starts flanneld again (it needs no API server for that);
	// flanneld finds no API server.
	const outage = 30 * time.Second
	deadline := time.Now().Add(outage)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(n.subnetFile()); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: subnet.env written while the API server is away (%v)", n.name, err)
		}
		time.Sleep(time.Second)
	}
	last, exits := c.flanneldAttempts(n, pod, first)
	failed := false
	for _, code := range exits {
		failed = failed || code == 1
	}
	if last <= first || !failed {
		t.Fatalf("%s: flanneld (attempt %d stopped) during the %s outage: last attempt %d, exit codes %v; want it started again and failing (exit 1)",
			n.name, first, outage, last, exits)
	}
	attempts := last - first
	logs := flanneldErrors(t, n, pod)
	if logs == "" {
		t.Fatalf("%s: flanneld logged no error with the API server away", n.name)
	}
	t.Logf("%s: API server away %s: the kubelet started flanneld %d times, exit codes %v (of the containers it keeps), subnet.env not written; flanneld's errors:\n%s", n.name, outage, attempts, exits, logs)
	apiStart := time.Now()
	c.startControlPlane()
	apiUp := time.Now()
	after := n.waitLease(5 * time.Minute)
	if after.raw != before.raw {
		t.Fatalf("%s: subnet.env after the outage:\n%s\nbefore:\n%s", n.name, after.raw, before.raw)
	}
	leased := time.Since(apiUp)
	if ran {
		n.startCheckpointd()
	}
	t.Logf("%s: with the API server away %s the kubelet started flanneld %d times, it exited (code 1) and wrote nothing; API server started → ready %s → same subnet.env written %s later",
		n.name, outage, attempts, apiUp.Sub(apiStart).Round(100*time.Millisecond), leased.Round(100*time.Millisecond))
}

// flanneldAttempts returns the highest attempt number (CRI metadata: the
// kubelet's restart count) of pod's kube-flannel containers on n, and the
// exit codes of those of them that exited after attempt since (the kubelet
// keeps only the last dead container of a pod).
func (c *cluster) flanneldAttempts(n *node, pod *corev1.Pod, since uint32) (uint32, []int32) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	sbs, err := n.cri.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var last uint32
	var exits []int32
	for _, sb := range sbs {
		if sb.GetMetadata().GetUid() != string(pod.UID) {
			continue
		}
		cs, err := n.containersOf(ctx, sb.Id)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range cs["kube-flannel"] {
			a := st.GetMetadata().GetAttempt()
			last = max(last, a)
			if a > since && st.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				exits = append(exits, st.ExitCode)
			}
		}
	}
	return last, exits
}

// flanneldErrors returns flanneld's error lines from the kubelet's logs of
// pod's kube-flannel container (every attempt).
func flanneldErrors(t testing.TB, n *node, pod *corev1.Pod) string {
	t.Helper()
	dir := filepath.Join(n.podLogsDir(), fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), "kube-flannel")
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			// CRI log lines: <time> <stream> <tag> <klog line>; errors start with E.
			if f := strings.SplitN(l, " ", 4); len(f) == 4 && strings.HasPrefix(f[3], "E") {
				lines = append(lines, f[3])
			}
		}
	}
	return strings.Join(lines, "\n")
}
