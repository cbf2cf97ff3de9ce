//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/install"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// shippedCheckpointdAddr is checkpointd's listen address as deploy/install
// leaves it (the daemon's default): each node's, in its network namespace.
const shippedCheckpointdAddr = "127.0.0.1:9469"

// shippedCRISocket is containerd's socket where checkpointd's static pod
// and the kubelet's default look for it; bindNodePaths binds the node's there.
const shippedCRISocket = "/run/containerd/containerd.sock"

// installJourney is the install the way an operator does it, on the two-node
// cluster running kube-flannel as kube-flannel.yml installed it, with no
// stickyip on the nodes yet (kube-controller-manager rolls the DaemonSet
// out, the scheduler places the pods), as docs/install.md says:
//
//  1. The image (two builds) imported into each node's containerd;
//     `kubectl apply --dry-run=server -f deploy/install/` passes whole on
//     the fresh cluster and again once installed; deploy/install is applied
//     with kubectl, exactly as shipped but for the image reference. Each
//     node's own directories are bound, in its mount namespace, on the host
//     paths the manifest names (bindNodePaths, at boot), so the DaemonSet
//     and checkpointd's static pod run unchanged.
//  2. Both nodes then run the plugin and checkpointd's static pod (healthy);
//     kube-flannel's ConfigMap is patched and kube-flannel restarted as
//     documented (each node's conflist is then the patched one, copied by
//     kube-flannel's own pods); a Deployment's two pods (one per node) get
//     their IPs through the installed plugin (the node's stickyip list).
//  3. The upgrade: the tag changed (both places) and applied again while
//     pods are created on both nodes; the rollout replaces node by node (one
//     node runs the new plugin while the other still runs the old), the
//     plugin is a runnable file at every look, every pod starts (no
//     FailedCreatePodSandBox), and each node's reservation, taken before
//     the upgrade, gives its pod its IP back after.
//  4. The uninstall of docs/install.md: conflist back to kube-flannel's own
//     (offlineFlannelConf: its cniVersion lowered for the offline flannel
//     plugin), pods started with stickyip deleted, the DaemonSet switched to
//     uninstall, then deleted: plugin, static pod and checkpointd's files
//     gone from each node, the IPAM store kept. A pod started with stickyip
//     that was left running cannot be torn down without the plugin (it
//     stays Terminating, FailedKillPod names the missing plugin, its address
//     stays allocated), and is once the binary is put back.
//
// It leaves the nodes as docs/install.md's uninstall ends: the host-local
// pod deleted and the IPAM store removed by hand.
func (c *cluster) installJourney() {
	t := c.t
	for _, n := range c.nodes {
		if _, err := os.Lstat(filepath.Join(n.cniBinDir, contract.PluginType)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %s before the install: %v, want none (the install starts from a node without stickyip)", n.name, contract.PluginType, err)
		}
	}
	if conf := c.kubeFlannelConfig()["cni-conf.json"]; conf != c.kubeFlannelShipped["cni-conf.json"] {
		t.Fatalf("kube-flannel's cni-conf.json before the install is not kube-flannel.yml's:\n%s", conf)
	}
	imgDir := harness.ShortTempDir(t)
	buildStart := time.Now()
	v1 := buildImage(t, imgDir, "e2e-install-v1")
	v2 := buildImage(t, imgDir, "e2e-install-v2")
	t.Logf("two image builds (%s, %s): %s", v1.version, v2.version, time.Since(buildStart).Round(100*time.Millisecond))
	c.installImages = []image{v1, v2}
	ctx := context.Background()
	cs := c.client
	for _, n := range c.nodes {
		v1.importInto(n)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, "deploy", "install")
	// The whole manifest, on a cluster that has never seen it.
	t.Logf("kubectl apply --dry-run=server -f deploy/install/ on the fresh cluster:\n%s", c.kubectl("apply", "--dry-run=server", "-f", shipped))

	// ---- 1-2. Install.
	start := time.Now()
	t.Logf("kubectl apply -f (deploy/install, image %s):\n%s", v1.ref, c.kubectl("apply", "-f", manifestFor(t, imgDir, v1)))
	took := c.waitInstalled(v1, start)
	c.kubectl("-n", installerNamespace, "rollout", "status", "daemonset/stickyip", "--timeout=3m")
	t.Logf("kubectl apply --dry-run=server -f deploy/install/ once installed:\n%s", c.kubectl("apply", "--dry-run=server", "-f", shipped))
	t.Logf("install: kubectl apply → plugin %s in each node's CNI bin dir and checkpointd's static pod healthy: node1 %s, node2 %s; rollout complete %s",
		v1.version, took["node1"].Round(100*time.Millisecond), took["node2"].Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))

	// kube-flannel's ConfigMap patched with the README's command and
	// kube-flannel restarted; each node's conflist is then the patched one.
	switchStart := time.Now()
	c.useStickyip()
	t.Logf("kube-flannel's ConfigMap patched, kube-flannel restarted, both nodes' conflists name stickyip: %s", time.Since(switchStart).Round(100*time.Millisecond))

	two := int32(2)
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: clusterPodTemplate("web", nil)},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod started with stickyip that stays through the uninstall (4.).
	straggler := c.nodes[1].podOn("straggler", nil)
	c.nodes[1].createPod(straggler)
	for name, p := range c.waitPlaced("default", "app=web", 2, 3*time.Minute) {
		n := c.node(name)
		if got := ipOf(n.stickyipList(t), "default/"+p.Name); got != p.IP {
			t.Fatalf("%s's stickyip list has default/%s at %q, the API %s: the IP did not come from the installed plugin", name, p.Name, got, p.IP)
		}
		t.Logf("Deployment web: pod %s on %s got %s through the installed plugin", p.Name, name, p.IP)
	}
	c.nodes[1].waitAPIPodRunning(straggler.Name, 2*time.Minute)

	// Each node's reservation, taken before the upgrade.
	reserved := map[string]string{}
	for _, n := range c.nodes {
		name := "sticky-" + n.name
		n.createPod(n.podOn(name, map[string]string{annReservation: "30"}))
		reserved[n.name] = n.waitAPIPodRunning(name, 2*time.Minute)
	}
	for _, n := range c.nodes {
		name := "sticky-" + n.name
		n.deletePodGracefully(name, 2*time.Minute)
		if r := reservationOf(n.stickyipList(t), "default/"+name); r == nil || r.IP != reserved[n.name] {
			t.Fatalf("%s: default/%s (IP %s) deleted, its reservation: %+v", n.name, name, reserved[n.name], r)
		}
	}

	// ---- 3. Upgrade while pods are created on both nodes.
	upgrade := manifestFor(t, imgDir, v2)
	up := c.upgradeWhilePodsStart(v1, v2,
		func() {
			t.Logf("kubectl apply --dry-run=server -f (deploy/install, image %s):\n%s", v2.ref, c.kubectl("apply", "--dry-run=server", "-f", upgrade))
		},
		func() {
			t.Logf("kubectl apply -f (deploy/install, image %s):\n%s", v2.ref, c.kubectl("apply", "-f", upgrade))
		})
	created := up.created
	for _, n := range c.nodes {
		name := "sticky-" + n.name
		n.createPod(n.podOn(name, map[string]string{annReservation: "30"}))
		if again := n.waitAPIPodRunning(name, 2*time.Minute); again != reserved[n.name] {
			t.Fatalf("%s: default/%s after the upgrade got %s, want its reserved %s", n.name, name, again, reserved[n.name])
		}
	}
	t.Logf("upgrade %s → %s: kubectl apply → %s; each node's reserved IP came back (%v)", v1.version, v2.version, up, reserved)

	// ---- 4. Uninstall, as docs/install.md says.
	// 1. The conflist back to host-local: kube-flannel's original
	// cni-conf.json patched back into its ConfigMap, and copied to each
	// node by kube-flannel's restarted pods.
	switchStart = time.Now()
	c.useFlannelIPAM()
	t.Logf("kube-flannel's original cni-conf.json patched back, kube-flannel restarted, both nodes' conflists copied: %s", time.Since(switchStart).Round(100*time.Millisecond))
	n1, n2 := c.nodes[0], c.nodes[1]
	n1.createPod(n1.podOn("after-switch", nil))
	if ip := n1.waitAPIPodRunning("after-switch", 2*time.Minute); ipOf(n1.stickyipList(t), "default/after-switch") != "" {
		t.Fatalf("default/after-switch (%s) is in stickyip's store: the conflist switch did not take", ip)
	}
	// 2. Every pod started with stickyip gone (but the straggler).
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range created {
		c.node(p.node).deletePodNow(p.name)
	}
	for _, n := range c.nodes {
		n.deletePodNow("sticky-" + n.name)
	}
	for _, n := range c.nodes {
		want := map[string]string{}
		if n == n2 {
			want["default/straggler"] = ""
		}
		eventually(t, n.name+": no stickyip allocation but the straggler's", 3*time.Minute, 2*time.Second, func() (bool, string) {
			got := map[string]string{}
			for _, e := range n.stickyipList(t) {
				if e.State == "allocated" {
					got[e.Namespace+"/"+e.Name] = ""
				}
			}
			return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("allocated: %v", got)
		})
	}
	for _, n := range c.nodes {
		if files := filesUnder(t, n.checkpointdDirs()...); len(files) == 0 {
			t.Fatalf("%s: checkpointd has no files in %v before the uninstall: the uninstall check would prove nothing", n.name, n.checkpointdDirs())
		} else {
			t.Logf("%s: checkpointd's files before the uninstall: %v", n.name, files)
		}
	}
	// 3. The DaemonSet switched to uninstall, rolled out, deleted.
	start = time.Now()
	c.kubectl("-n", installerNamespace, "patch", "daemonset", "stickyip", "--type=json",
		"-p", `[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":["uninstall","--wait"]}]`)
	c.kubectl("-n", installerNamespace, "rollout", "status", "daemonset/stickyip", "--timeout=4m")
	rolled := time.Since(start)
	t.Logf("kubectl delete -f deploy/install/:\n%s", c.kubectl("delete", "-f", shipped, "--timeout=3m"))
	for _, n := range c.nodes {
		if _, err := pluginVersion(filepath.Join(n.cniBinDir, contract.PluginType)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: plugin after the uninstall: %v, want it gone", n.name, err)
		}
		if _, err := os.Stat(filepath.Join(n.staticPodDir(), install.ManifestName)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: checkpointd's static pod manifest after the uninstall: %v, want it gone", n.name, err)
		}
		if files := filesUnder(t, n.checkpointdDirs()...); len(files) != 0 {
			t.Errorf("%s: checkpointd's files left after the uninstall: %v", n.name, files)
		}
		if resp, err := n.httpClient().Get("http://" + shippedCheckpointdAddr + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("%s: checkpointd still answers on %s after the uninstall", n.name, shippedCheckpointdAddr)
		}
		if _, err := os.Stat(filepath.Join(n.stickyipDataDir(), boltstore.DBFile)); err != nil {
			t.Errorf("%s: the IPAM store after the uninstall: %v, want it kept", n.name, err)
		}
		eventually(t, n.name+"'s checkpointd mirror pod gone", time.Minute, time.Second, func() (bool, string) {
			_, err := cs.CoreV1().Pods(install.PodNamespace).Get(ctx, install.PodName+"-"+n.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	if _, err := cs.AppsV1().DaemonSets(installerNamespace).Get(ctx, "stickyip", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet %s/stickyip after kubectl delete: %v, want it gone", installerNamespace, err)
	}
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, installerNamespace, metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("namespace %s after kubectl delete -f deploy/install/: %v, want it untouched", installerNamespace, err)
	}
	n1.waitAPIPodRunning("after-switch", 10*time.Second)
	t.Logf("uninstall: DaemonSet switched to uninstall and rolled out on both nodes %s, deleted %s later: plugin, static pod, checkpointd's files gone from both nodes, IPAM store kept; default/after-switch (host-local) runs on",
		rolled.Round(100*time.Millisecond), (time.Since(start) - rolled).Round(100*time.Millisecond))

	// A pod started with stickyip and left running through the uninstall.
	stragglerIP := ipOf(n2.stickyipList(t), "default/straggler")
	if stragglerIP == "" {
		t.Fatal("default/straggler has no allocation in node2's stickyip list before its deletion")
	}
	deleted := time.Now()
	if err := cs.CoreV1().Pods("default").Delete(ctx, "straggler", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet tries to kill it and fails (a FailedKillPod event naming
	// the missing plugin), and fails again when it retries; then the pod is
	// still terminating and its address still allocated.
	killFailed := func() (int, string) {
		n, last := 0, ""
		for _, ev := range n2.podEvents(ctx, "straggler") {
			// The runtime's error, quoted inside the kubelet's: failed to find plugin \"stickyip\".
			if ev.Reason == "FailedKillPod" && strings.Contains(ev.Message, "failed to find plugin") && strings.Contains(ev.Message, "stickyip") {
				n, last = n+int(max(ev.Count, 1)), ev.Message
			}
		}
		return n, last
	}
	eventually(t, "the kubelet's kill of default/straggler failing twice, naming the missing plugin", 3*time.Minute, time.Second, func() (bool, string) {
		n, _ := killFailed()
		return n >= 2, fmt.Sprintf("%d FailedKillPod naming stickyip; events %v", n, eventReasons(n2.podEvents(ctx, "straggler")))
	})
	if ipOf(n2.stickyipList(t), "default/straggler") != stragglerIP {
		t.Fatalf("default/straggler's allocation (%s) changed with no plugin installed", stragglerIP)
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, "straggler", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("default/straggler after two failed kills with no plugin: %v, want it still terminating", err)
	}
	_, last := killFailed()
	t.Logf("default/straggler (started with stickyip, %s) deleted after the uninstall: %s later, after two failed kills, still Terminating, its address still allocated; events %v: %s",
		stragglerIP, time.Since(deleted).Round(100*time.Millisecond), eventReasons(n2.podEvents(ctx, "straggler")), last)
	start = time.Now()
	b, err := os.ReadFile(filepath.Join(n2.bins.project, "stickyip"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n2.cniBinDir, contract.PluginType), b, 0o755)
	eventually(t, "default/straggler torn down once the plugin is back", 3*time.Minute, 2*time.Second, func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "straggler", metav1.GetOptions{})
		ip := ipOf(n2.stickyipList(t), "default/straggler")
		return apierrors.IsNotFound(err) && ip == "", fmt.Sprintf("API: %v; allocated %q", err, ip)
	})
	t.Logf("plugin binary put back on node2 → default/straggler torn down and its address released: %s", time.Since(start).Round(100*time.Millisecond))

	// What docs/install.md leaves to the operator: the host-local pod goes
	// with the rest of the workload, the IPAM store is removed by hand.
	n1.deletePodGracefully("after-switch", 2*time.Minute)
	for _, n := range c.nodes {
		removeContents(t, n.stickyipDataDir())
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Fatalf("pods left in default after the install journey: %d (%s, ...)", len(pods.Items), pods.Items[0].Name)
	}
}

// upgradeRun is what an upgrade while pods are created showed.
type upgradeRun struct {
	took    map[string]time.Duration // per node, from the apply: the new plugin and a healthy checkpointd
	rollout time.Duration            // from the apply to the rollout complete
	looks   int                      // runs of the nodes' plugin meanwhile (none failed)
	created []churnPod
	during  map[string]int // pods created on each node within the rollout
}

func (u upgradeRun) String() string {
	return fmt.Sprintf("node1 %s, node2 %s (plugin and healthy checkpointd), rollout complete %s; plugin run %d times meanwhile, 0 failed; %d pods created (node1 %d, node2 %d within the rollout), all started with no failed sandbox",
		u.took["node1"].Round(100*time.Millisecond), u.took["node2"].Round(100*time.Millisecond), u.rollout.Round(100*time.Millisecond),
		u.looks, len(u.created), u.during["node1"], u.during["node2"])
}

// upgradeWhilePodsStart upgrades the nodes from one image to another the
// way apply does it (kubectl apply, helm upgrade; check runs first, pods
// already being created) while pods are created on both nodes every 3 s,
// and waits until every node runs the new image's plugin and checkpointd.
// It fails the test unless the plugin was a runnable file at every look,
// one node ran the new plugin while the other still ran the old (node by
// node), pods were created on each node within the rollout, and every pod
// created started with no FailedCreatePodSandBox (0 failed CNI calls).
func (c *cluster) upgradeWhilePodsStart(from, to image, check, apply func()) upgradeRun {
	t := c.t
	t.Helper()
	for _, n := range c.nodes {
		to.importInto(n)
	}
	watch := c.watchPlugins(t, from, to)
	churn := c.createPodsUntil(t, 3*time.Second)
	churn.waitCreated(t, "a pod created on each node before the upgrade starts", time.Time{})
	check()
	start := time.Now()
	apply()
	u := upgradeRun{took: c.waitInstalled(to, start), during: map[string]int{}}
	c.kubectl("-n", installerNamespace, "rollout", "status", "daemonset/stickyip", "--timeout=3m")
	end := time.Now()
	u.rollout = end.Sub(start)
	churn.waitCreated(t, "a pod created on each node after the rollout", end)
	created, err := churn.stop()
	if err != nil {
		t.Errorf("pod creation during the upgrade: %v", err)
	}
	u.created = created
	seen := watch.stop()
	u.looks = seen.looks
	if seen.failures > 0 {
		t.Errorf("the plugin could not be run %d times of %d looks during the upgrade (last: %s)", seen.failures, seen.looks, seen.lastFailure)
	}
	if !seen.mixed {
		t.Errorf("never saw one node on %s while the other was still on %s: the rollout did not go node by node", to.version, from.version)
	}
	for _, p := range created {
		if p.at.After(start) && p.at.Before(end) {
			u.during[p.node]++
		}
	}
	if u.during["node1"] == 0 || u.during["node2"] == 0 {
		t.Errorf("pods created on each node while the upgrade ran (%s): %v; the test proved nothing about pod starts there", u.rollout, u.during)
	}
	ctx := context.Background()
	for _, p := range created {
		n := c.node(p.node)
		n.waitAPIPodRunning(p.name, 3*time.Minute)
		for _, ev := range n.podEvents(ctx, p.name) {
			if ev.Reason == "FailedCreatePodSandBox" {
				t.Errorf("pod %s on %s: a pod start failed during the upgrade: %s", p.name, p.node, ev.Message)
			}
		}
	}
	return u
}

// removeContents removes everything in dir, not dir itself (a node's bind
// mount point).
func removeContents(t testing.TB, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// podOn is testPod bound to node n.
func (n *node) podOn(name string, annotations map[string]string) *corev1.Pod {
	p := testPod(name, annotations)
	p.Spec.NodeName = n.name
	return p
}

// manifestFor writes deploy/install as an operator edits it for img: the
// image reference replaced in both places (the container's image and
// --image), nothing else; it returns the directory to apply.
func manifestFor(t testing.TB, parent string, img image) string {
	t.Helper()
	ds, err := deploy.Install()
	if err != nil {
		t.Fatal(err)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "install", "stickyip.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped := ds.Spec.Template.Spec.Containers[0].Image
	if n := strings.Count(string(b), shipped); n != 2 {
		t.Fatalf("deploy/install/stickyip.yaml names %s %d times, want 2 (image and --image)", shipped, n)
	}
	dir := filepath.Join(parent, "install-"+img.version)
	writeFile(t, filepath.Join(dir, "stickyip.yaml"), []byte(strings.ReplaceAll(string(b), shipped, img.ref)), 0o644)
	return dir
}

// bindNodePaths binds, in the node's mount namespace (its containerd, runc
// and kubelet run there), the node's own directories on the host paths that
// deploy/install and checkpointd's static pod name, so both run as shipped:
// the kubelet's static pod directory and kubeconfig, the CNI bin and config
// directories, checkpointd's directories, the IPAM data directory, flannel's
// /run/flannel, the CRI socket, flannel's and host-local's data
// directories. A conflist from kube-flannel's ConfigMap (with or without
// deploy/kube-flannel's patch), as kube-flannel's install-cni copies it,
// uses the default paths, which these binds make the node's own. The empty
// mount points it creates on the machine are removed at cleanup; a power cut
// binds them again (MountNS.Reboot).
func (n *node) bindNodePaths() {
	t := n.t
	t.Helper()
	binds := []struct{ target, source string }{
		{"/etc/kubernetes", filepath.Join(n.dir, "etc-kubernetes")},
		{"/etc/kubernetes/manifests", n.staticPodDir()},
		{"/etc/kubernetes/kubelet.conf", n.kubeconfig()},
		{"/opt/cni/bin", n.cniBinDir},
		{"/etc/cni/net.d", n.cniConfDir()},
		{"/var/lib/stickyip", filepath.Join(n.dir, "var-lib-stickyip")},
		{contract.DefaultDataDir, n.stickyipDataDir()},
		{"/run/stickyip", filepath.Join(n.runDir(), "stickyip")},
		{"/run/flannel", filepath.Dir(n.subnetFile())},
		{"/run/containerd", filepath.Join(n.dir, "run-containerd")},
		{shippedCRISocket, n.ctd.Address},
		// flannel's own state and host-local's store (also where stickyip
		// imports host-local's allocations from): kube-flannel's conflist
		// names no path
		{"/var/lib/cni/flannel", filepath.Join(n.dir, "flannel", "data")},
		{"/var/lib/cni/networks", filepath.Join(n.dir, "host-local")},
		// the runtime's CNI result cache (libcni's), which a store rebuild
		// reads: the node's own, not the machine's
		{"/var/lib/cni/results", filepath.Join(n.dir, "cni-results")},
	}
	for _, b := range binds {
		if _, err := os.Stat(b.source); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(b.source, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		// Targets below /etc/kubernetes and /run/containerd are made in
		// the node's directories bound there.
		if !strings.HasPrefix(b.target, "/etc/kubernetes/") && !strings.HasPrefix(b.target, "/run/containerd/") {
			harness.HostMountPoint(t, b.target, false)
		}
	}
	for _, b := range binds {
		n.mnt.Bind(t, b.target, b.source)
	}
	n.shippedPaths = true
}

// checkpointdDirs are where the installed checkpointd keeps its files on
// the node: /var/lib/stickyip and /run/stickyip (bindNodePaths).
func (n *node) checkpointdDirs() []string {
	return []string{filepath.Join(n.dir, "var-lib-stickyip"), filepath.Join(n.runDir(), "stickyip")}
}

// filesUnder lists the files (not directories) below dirs.
func filesUnder(t testing.TB, dirs ...string) []string {
	t.Helper()
	var files []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return files
}

// waitInstalled waits until every node runs img's plugin and checkpointd
// (node.installed, at the shipped listen address) and returns, per node,
// how long after since it first did.
func (c *cluster) waitInstalled(img image, since time.Time) map[string]time.Duration {
	t := c.t
	t.Helper()
	done := map[string]time.Duration{}
	eventually(t, img.version+" installed on every node", 4*time.Minute, 500*time.Millisecond, func() (bool, string) {
		var waiting []string
		for _, n := range c.nodes {
			if _, ok := done[n.name]; ok {
				continue
			}
			if ok, msg := n.installed(img, shippedCheckpointdAddr); ok {
				done[n.name] = time.Since(since)
			} else {
				waiting = append(waiting, n.name+": "+msg)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	})
	return done
}

// pluginWatch runs each node's installed plugin (`stickyip version`) every
// 200 ms until stopped.
type pluginWatch struct {
	stopc chan struct{}
	once  sync.Once
	done  chan struct{}
	res   pluginLooks
}

// pluginLooks is what a pluginWatch saw: how many runs, how many failed
// (the last failure), and whether one node ran the new version while the
// other still ran the old one.
type pluginLooks struct {
	looks, failures int
	lastFailure     string
	mixed           bool
}

// watchPlugins starts watching the nodes' plugins, going from one image to
// another. The watch ends with t at the latest, so that a failed step leaves
// no goroutine behind.
func (c *cluster) watchPlugins(t testing.TB, from, to image) *pluginWatch {
	w := &pluginWatch{stopc: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { w.stop() })
	go func() {
		defer close(w.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			var versions []string
			for _, n := range c.nodes {
				w.res.looks++
				v, err := pluginVersion(filepath.Join(n.cniBinDir, contract.PluginType))
				if err != nil {
					w.res.failures++
					w.res.lastFailure = fmt.Sprintf("%s: %v", n.name, err)
				}
				versions = append(versions, v)
			}
			if all := strings.Join(versions, " "); strings.Contains(all, from.version) && strings.Contains(all, to.version) {
				w.res.mixed = true
			}
			select {
			case <-w.stopc:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the watch (once; later calls wait for it) and returns what it saw.
func (w *pluginWatch) stop() pluginLooks {
	w.once.Do(func() { close(w.stopc) })
	<-w.done
	return w.res
}

// churnPod is a pod the churn created: its name, node and when.
type churnPod struct {
	name, node string
	at         time.Time
}

// podChurn creates pods on the nodes in turn until stopped.
type podChurn struct {
	stopc   chan struct{}
	once    sync.Once
	done    chan struct{}
	mu      sync.Mutex
	created []churnPod
	err     error
}

// createPodsUntil creates a pod (during-<i>, bound to node i mod 2) every
// interval until stopped or a creation fails. The churn ends with t at the
// latest, and only the test's goroutine reports (stop), so that a failed
// step leaves no goroutine that outlives its test.
func (c *cluster) createPodsUntil(t testing.TB, interval time.Duration) *podChurn {
	ch := &podChurn{stopc: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { ch.once.Do(func() { close(ch.stopc) }); <-ch.done })
	go func() {
		defer close(ch.done)
		for i := 0; ; i++ {
			n := c.nodes[i%len(c.nodes)]
			p := n.podOn(fmt.Sprintf("during-%d", i), nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := c.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
			cancel()
			ch.mu.Lock()
			if err != nil {
				ch.err = fmt.Errorf("create pod %s: %w", p.Name, err)
			} else {
				ch.created = append(ch.created, churnPod{p.Name, n.name, time.Now()})
			}
			ch.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-ch.stopc:
				return
			case <-time.After(interval):
			}
		}
	}()
	return ch
}

// waitCreated waits until the churn has created a pod on each node after
// since (what says why), failing the test if a creation failed.
func (ch *podChurn) waitCreated(t testing.TB, what string, since time.Time) {
	t.Helper()
	eventually(t, what, time.Minute, 200*time.Millisecond, func() (bool, string) {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if ch.err != nil {
			t.Fatal(ch.err)
		}
		nodes := map[string]bool{}
		for _, p := range ch.created {
			if p.at.After(since) {
				nodes[p.node] = true
			}
		}
		return len(nodes) >= 2, fmt.Sprintf("pods created on %v", nodes)
	})
}

// stop ends the churn and returns the pods it created and the creation that
// failed, if one did.
func (ch *podChurn) stop() ([]churnPod, error) {
	ch.once.Do(func() { close(ch.stopc) })
	<-ch.done
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.created, ch.err
}
