//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/flannel"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// powerCut is a power cut on real flannel (a step of TestCluster):
// node2 runs kube-system/keeper (opted in to checkpoints, a 30-minute
// reservation, serving pings) and node1 default/probe; then:
//
//  1. The API server goes away, and node2 loses power (its kubelet,
//     containerd with every sandbox, kube-proxy and checkpointd killed; its
//     mounts, its /run tmpfs, flanneld's vxlan link and routes and every
//     iptables rule gone: powerOff) and boots. Without the API server the
//     kubelet does not know kube-flannel's DaemonSet pod: flanneld does
//     not run and writes no lease. checkpointd puts the lease it kept back
//     (the same subnet.env, counted once) and restores keeper as a static
//     pod, which runs with keeper's IP and answers on it from node2.
//  2. The API server returns: the kubelet starts kube-flannel's pod again,
//     flanneld writes its own subnet.env (a new file, the lease of the
//     Node's podCIDR; checkpointd logs that flanneld owns it again),
//     checkpointd hands the copy back (CheckpointHandedBack) and keeper's
//     API pod runs with the same IP; keeper and probe ping each other
//     across the nodes.
//
// keeper and probe are deleted at the end.
func (c *cluster) powerCut() {
	t := c.t
	ctx := context.Background()
	n1, n2 := c.nodes[0], c.nodes[1]
	const ns, name = "kube-system", "keeper"
	keeper := n2.podOn(name, map[string]string{annCheckpoint: "true", annReservation: "30"})
	keeper.Namespace = ns
	keeper.Spec.Containers[0].Args = []string{"-serve", ":" + echoPort}
	n2.createPod(keeper)
	probe := n1.podOn("probe", nil)
	probe.Spec.Containers[0].Args = []string{"-serve", ":" + echoPort}
	n1.createPod(probe)
	ip := n2.waitPodRunningIn(ns, name, 2*time.Minute)
	probeIP := n1.waitAPIPodRunning(probe.Name, 2*time.Minute)
	if !n2.inSubnet(ip) || !n1.inSubnet(probeIP) {
		t.Fatalf("%s/%s got %s (%s's lease %s), default/probe %s (%s's lease %s)", ns, name, ip, n2.name, n2.subnet, probeIP, n1.name, n1.subnet)
	}
	before, err := n2.lease()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, n2.name+": keeper checkpointed and flanneld's lease saved", time.Minute, time.Second, func() (bool, string) {
		if _, err := os.Stat(n2.checkpointFile(ns, name)); err != nil {
			return false, err.Error()
		}
		saved, err := os.ReadFile(filepath.Join(n2.checkpointDir(), flannel.SavedFileName))
		return err == nil && strings.Contains(string(saved), before.raw), fmt.Sprintf("saved lease %q (%v)", saved, err)
	})
	t.Logf("%s/%s runs on %s with %s, checkpointed; %s's lease saved by checkpointd:\n%s", ns, name, n2.name, ip, n2.name, before.raw)

	// ---- 1. API server away; node2 loses power and boots.
	c.apiserver.stop(t, syscall.SIGKILL, 10*time.Second)
	n2.powerOff()
	n2.powerOn()
	booted := n2.kubelet.started
	n2.copyRuns(ctx, ns, name, ip, 3*time.Minute, false)
	restored := time.Since(booted)
	after, err := n2.lease()
	if err != nil || after.raw != before.raw {
		t.Fatalf("%s: subnet.env with the API server away (%v):\n%s\nwant the lease of the last boot:\n%s", n2.name, err, after.raw, before.raw)
	}
	if v, _ := n2.metric("checkpointd_flannel_lease_restores_total"); v != "1" {
		t.Errorf("checkpointd_flannel_lease_restores_total = %q, want 1", v)
	}
	putBack := fileIno(t, n2.subnetFile())
	if cs := n2.containersSince(ctx, "kube-flannel", booted); len(cs) != 0 {
		t.Fatalf("%s: kube-flannel containers started with the API server away: %v", n2.name, cs)
	}
	reply, err := n2.ping(net.JoinHostPort(ip, echoPort))
	if err != nil {
		t.Fatalf("%s: the static copy of %s/%s at %s: %v", n2.name, ns, name, ip, err)
	}
	t.Logf("%s booted with the API server away: flanneld not started (its pod unknown to the kubelet), checkpointd put the last lease back; "+
		"the static copy of %s/%s runs with %s %s after the kubelet started and answers: %s", n2.name, ns, name, ip, restored.Round(100*time.Millisecond), reply)

	// ---- 2. The API server returns.
	apiStart := time.Now()
	c.startControlPlane()
	eventually(t, n2.name+": flanneld writes its own subnet.env", 5*time.Minute, time.Second, func() (bool, string) {
		ino := fileIno(t, n2.subnetFile())
		return ino != 0 && ino != putBack, fmt.Sprintf("subnet.env inode %d (the one put back: %d)", ino, putBack)
	})
	written := time.Since(apiStart)
	own := n2.waitLease(time.Minute)
	if own.raw != before.raw {
		t.Fatalf("%s: flanneld's subnet.env after the outage:\n%s\nbefore:\n%s", n2.name, own.raw, before.raw)
	}
	c.flannelPod(n2)
	// checkpointd looks at the lease on its loop's period: the line may
	// come a moment after flanneld's file (a run on a loaded machine read
	// the log first).
	owned := n2.waitLogTime(n2.checkpointd, apiStart, "flanneld wrote its own subnet lease: it owns the file again", time.Minute)
	n2.waitHandedBack(ctx, ns, name, ip, 3*time.Minute)
	handedBack := time.Since(apiStart)
	if ev := n2.eventTexts(ctx, ns, name); !strings.Contains(strings.Join(ev, "\n"), "CheckpointHandedBack") {
		t.Errorf("%s/%s events %v lack CheckpointHandedBack", ns, name, ev)
	}
	k, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.client.CoreV1().Pods("default").Get(ctx, probe.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{n1.name: p, n2.name: k}
	ips := map[string]string{n1.name: probeIP, n2.name: ip}
	for _, pair := range [][2]*node{{n1, n2}, {n2, n1}} {
		from, to := pods[pair[0].name], pods[pair[1].name]
		addr := net.JoinHostPort(ips[pair[1].name], echoPort)
		var reply string
		// flanneld's routes to the other node may come a moment after its lease.
		eventually(t, from.Name+" pings "+to.Name+" across the nodes", time.Minute, time.Second, func() (bool, string) {
			reply, err = c.pingPod(from, addr)
			return err == nil, fmt.Sprint(err)
		})
		if !strings.Contains(reply, "pong from "+to.Name+": ping from "+from.Name) {
			t.Fatalf("%s → %s answered %q", from.Name, addr, reply)
		}
	}
	t.Logf("API server back: flanneld wrote its own subnet.env %s after the API server's start (checkpointd: it owns the file again at %s); "+
		"%s/%s handed back to its API pod with %s %s after; keeper and probe ping each other across the nodes",
		written.Round(100*time.Millisecond), owned.Format("15:04:05.000"), ns, name, ip, handedBack.Round(100*time.Millisecond))

	n2.deletePodGracefullyIn(ns, name, 2*time.Minute)
	n1.deletePodGracefully(probe.Name, 2*time.Minute)
}

// fileIno returns the inode of the file at path, 0 when there is none.
func fileIno(t testing.TB, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// containersSince returns the containers named name the node's runtime
// created after since (any state, any pod).
func (n *node) containersSince(ctx context.Context, name string, since time.Time) []string {
	n.t.Helper()
	resp, err := n.cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, c := range resp.Containers {
		if c.GetMetadata().GetName() == name && time.Unix(0, c.CreatedAt).After(since) {
			out = append(out, fmt.Sprintf("%s %s", c.Id, c.State))
		}
	}
	return out
}

// ping sends one ping from the node's network namespace to a pod serving
// pings (the harness image's -serve) at addr and returns the pong.
func (n *node) ping(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialIn(n.nsHandle)(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(conn, "ping from %s\n", n.name); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer: %w", err)
	}
	return strings.TrimSpace(reply), nil
}
