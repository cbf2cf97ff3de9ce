//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/install"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInstaller is the installer on a real node: the image built by
// deploy/image/cmd/mkimage and imported into the node's containerd, the installer
// pod of deploy/install (the DaemonSet's own pod template, bound to the node:
// no kube-controller-manager runs here to create the DaemonSet's pods),
// a pod that then gets its IP through the installed plugin, an upgrade to a
// second image build while pods are being created, and a power cut with the
// API server away that the installed (static pod) checkpointd restores from.
// The manifests pass a server-side dry run. It prints what it measures:
// the install, a pod start through the installed plugin, the upgrade window
// and the restore after the power cut.
func TestInstaller(t *testing.T) {
	n := newNode(t, nodeOptions{ipam: "installed"}) // the conflist names stickyip; the bin dir lacks it
	ctx := context.Background()
	v1 := buildImage(t, n.dir, "e2e-install-v1")
	n.startControlPlane()
	n.ensureNamespace("kube-system")
	n.startContainerd()
	v1.importInto(n)
	n.startKubelet(true)

	ds, err := deploy.Install()
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := n.client.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, dry); err != nil {
		t.Fatalf("deploy/install DaemonSet, server-side dry run: %v", err)
	}
	t.Log("deploy/install: DaemonSet accepted by a server-side dry run")

	// ---- Install: the plugin lands in the CNI bin dir, checkpointd runs as a static pod.
	start := time.Now()
	n.runInstaller(ds, v1)
	n.waitInstalled(v1, checkpointdAddr)
	t.Logf("install: installer pod created → plugin %s in the CNI bin dir and checkpointd's static pod healthy: %s",
		v1.version, time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	n.createPod(testPod("web", map[string]string{annReservation: "30"}))
	ip := n.waitAPIPodRunning("web", 3*time.Minute)
	webStart := time.Since(start)
	if !n.inSubnet(ip) {
		t.Fatalf("pod IP %s is not in the node subnet %s", ip, nodeSubnet)
	}
	if got := ipOf(n.stickyipList(t), "default/web"); got != ip {
		t.Fatalf("stickyip list has default/web at %q, the API %s: the pod's IP did not come from the installed plugin", got, ip)
	}
	t.Logf("pod default/web got %s through the installed plugin (created → Running %s)", ip, webStart.Round(100*time.Millisecond))
	n.deletePodGracefully("web", 2*time.Minute) // its IP is reserved for 30 min
	before := n.stickyipList(t)

	// ---- Upgrade to a second build while pods are being created.
	v2 := buildImage(t, n.dir, "e2e-install-v2")
	v2.importInto(n)
	var wg sync.WaitGroup
	var created []string
	var createdAt []time.Time
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 8; i++ {
			name := fmt.Sprintf("during-upgrade-%d", i)
			if _, err := n.client.CoreV1().Pods("default").Create(ctx, testPod(name, nil), metav1.CreateOptions{}); err != nil {
				t.Errorf("create pod %s: %v", name, err)
				return
			}
			created = append(created, name)
			createdAt = append(createdAt, time.Now())
			time.Sleep(3 * time.Second)
		}
	}()
	upgradeStart := time.Now()
	n.deletePodGracefullyIn(ds.Namespace, installerPodName, time.Minute) // what the rollout does, node by node
	n.runInstaller(ds, v2)
	n.waitInstalled(v2, checkpointdAddr)
	upgradeEnd := time.Now()
	wg.Wait()
	during := 0
	for _, at := range createdAt {
		if at.After(upgradeStart) && at.Before(upgradeEnd) {
			during++
		}
	}
	if during == 0 {
		t.Errorf("no pod was created while the upgrade ran (%s): the test proved nothing about pod starts during an upgrade", upgradeEnd.Sub(upgradeStart))
	}
	for _, name := range created {
		n.waitAPIPodRunning(name, 3*time.Minute)
		for _, ev := range n.podEvents(ctx, name) {
			if ev.Reason == "FailedCreatePodSandBox" {
				t.Errorf("pod %s: a pod start failed during the upgrade: %s", name, ev.Message)
			}
		}
	}
	after := n.stickyipList(t)
	if r := reservationOf(after, "default/web"); r == nil || r.IP != ip || reservationOf(before, "default/web") == nil {
		t.Fatalf("reservation of default/web across the upgrade: before %+v, after %+v", reservationOf(before, "default/web"), r)
	}
	n.createPod(testPod("web", map[string]string{annReservation: "30"}))
	if again := n.waitAPIPodRunning("web", 2*time.Minute); again != ip {
		t.Fatalf("default/web after the upgrade got %s, want its reserved %s", again, ip)
	}
	t.Logf("upgrade %s → %s: old installer pod deleted → %s installed and its checkpointd healthy: %s; %d pods created (%d of them within that window), all started with no failed sandbox; default/web got %s back",
		v1.version, v2.version, v2.version, upgradeEnd.Sub(upgradeStart).Round(100*time.Millisecond), len(created), during, ip)

	// ---- The data directory removed whole on the host while pods run (its
	// creation mark with it), as an operator's `rm -rf` does it: the plugin
	// refuses every ADD (the runtime's CNI result cache shows the store
	// existed) and checkpointd rebuilds the store from the runtime — when
	// the directory went, the static-pod checkpointd, whose mount holds the
	// removed one, exits and the kubelet starts it again on the host's
	// directory; when a writer (the runtime's CNI STATUS, checkpointd) put
	// a file back while rm ran, the directory stays with what it wrote, as
	// `rm -rf` leaves it ("Directory not empty"). Either way no address a
	// running pod holds is handed out.
	running := map[string]string{"web": ip}
	for _, name := range created {
		running[name] = n.waitAPIPodRunning(name, time.Minute)
	}
	start = time.Now()
	if left := removeAll(t, n.stickyipDataDir()); left != nil {
		t.Logf("rm -rf %s met a writer: the directory stays, holding %v", n.stickyipDataDir(), left)
	}
	n.createPod(testPod("after-removal", nil))
	newIP := n.waitAPIPodRunning("after-removal", 3*time.Minute)
	for name, held := range running {
		if held == newIP {
			t.Fatalf("after the data directory's removal, default/after-removal got %s, which running pod %s holds", newIP, name)
		}
	}
	list := n.stickyipList(t)
	for name, held := range running {
		if got := ipOf(list, "default/"+name); got != held {
			t.Fatalf("after the data directory's removal, stickyip list has default/%s at %q, want its running address %s", name, got, held)
		}
	}
	t.Logf("data directory removed whole with %d pods running: default/after-removal running with %s (none of theirs) %s later, every running pod's address in the rebuilt store",
		len(running), newIP, time.Since(start).Round(100*time.Millisecond))

	// ---- Power cut with the API server away: the installed checkpointd
	// (a static pod) starts without it and restores.
	n.createPod(podSpec("kube-system", "keeper", map[string]string{annCheckpoint: "true", annReservation: "30"}))
	keeperIP := n.waitPodRunningIn("kube-system", "keeper", 3*time.Minute)
	eventually(t, "checkpoint of kube-system/keeper", 2*time.Minute, time.Second, func() (bool, string) {
		_, err := os.Stat(n.checkpointFile("kube-system", "keeper"))
		return err == nil, fmt.Sprint(err)
	})
	n.stopAPIServer()
	n.powerOff()
	n.powerOn()
	start = time.Now()
	eventually(t, "kube-system/keeper restored with its IP by the installed checkpointd", 4*time.Minute, 2*time.Second, func() (bool, string) {
		copies, err := n.staticCopies(ctx, "kube-system", "keeper")
		if err != nil {
			return false, err.Error()
		}
		return len(copies) == 1 && copies[0].IP == keeperIP, fmt.Sprintf("copies %+v", copies)
	})
	t.Logf("after the power cut with the API server away, kube-system/keeper runs again with %s: %s after the kubelet started",
		keeperIP, time.Since(start).Round(100*time.Millisecond))
}

const (
	installerPodName   = "stickyip-install-" + nodeName
	installerNamespace = metav1.NamespaceSystem                    // deploy/install's
	installerSelector  = "app.kubernetes.io/name=stickyip-install" // its DaemonSet's pods
	imageRefBase       = "localhost/stickyip/stickyip:"
)

// image is an image archive built for the test.
type image struct {
	version, ref, archive, digest string
}

// buildImage builds stickyip and checkpointd with version v and packs them
// with deploy/image/cmd/mkimage, as make image does, in a directory below parent.
func buildImage(t testing.TB, parent, v string) image {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "image-"+v)
	ldflags := "-s -w -X github.com/stickyip/stickyip/contract.Version=" + v
	for name, pkg := range map[string]string{"stickyip": "./plugins/ipam/stickyip", "checkpointd": "./checkpointd/cmd/checkpointd",
		"mkimage": "./deploy/image/cmd/mkimage"} {
		goBuild(t, root, ldflags, filepath.Join(dir, name), pkg)
	}
	img := image{version: v, ref: imageRefBase + v, archive: filepath.Join(dir, "image.tar")}
	out := harness.MustRun(t, nil, filepath.Join(dir, "mkimage"), "-o", img.archive, "-ref", img.ref,
		"-version", v, "-epoch", "1700000000", "stickyip="+filepath.Join(dir, "stickyip"), "checkpointd="+filepath.Join(dir, "checkpointd"))
	f := strings.Fields(out)
	if len(f) != 3 || f[1] != img.ref {
		t.Fatalf("mkimage printed %q", out)
	}
	img.digest = f[2]
	return img
}

// goBuild builds the static binary of pkg, as make build does (no
// harness.Run: a link on a busy machine can take longer than its bound).
func goBuild(t testing.TB, root, ldflags, out, pkg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-C", root, "-trimpath", "-tags", "grpcnotrace", "-ldflags="+ldflags, "-o", out, pkg) // as make build
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// importInto imports the archive into the node's containerd (namespace
// k8s.io, the kubelet's) and checks the digest there is the one mkimage printed.
func (img image) importInto(n *node) {
	t := n.t
	t.Helper()
	if out, err := n.ctd.Ctr("images", "import", img.archive); err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", img.archive, err, out)
	}
	out, err := n.ctd.Ctr("images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == img.ref {
			if f[2] != img.digest {
				t.Fatalf("containerd has %s at %s, mkimage built %s", img.ref, f[2], img.digest)
			}
			t.Logf("image %s (%s) imported", img.ref, img.digest)
			return
		}
	}
	t.Fatalf("ctr images ls lacks %s:\n%s", img.ref, out)
}

// runInstaller creates the DaemonSet's pod for this node: its template, with
// the node's paths for the hostPath volumes (this node keeps everything in
// the test's directory), the test image, and the node's checkpointd settings.
func (n *node) runInstaller(ds *appsv1.DaemonSet, img image) {
	t := n.t
	t.Helper()
	paths := map[string]string{
		"/opt/cni/bin":                  n.cniBinDir,
		"/etc/kubernetes/manifests":     n.staticPodDir(),
		"/etc/kubernetes/kubelet.conf":  filepath.Join(n.dir, "kubelet.kubeconfig"),
		"/var/lib/stickyip/checkpoints": n.checkpointDir(), // used by uninstall only
		"/run/stickyip/checkpointd":     filepath.Join(n.runDir(), "stickyip", "checkpointd"),
	}
	tmpl := ds.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: installerPodName, Namespace: ds.Namespace, Labels: tmpl.Labels},
		Spec: tmpl.Spec}
	pod.Spec.NodeName = nodeName
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].EmptyDir != nil {
			continue // the pod's own (its ready file)
		}
		hp := pod.Spec.Volumes[i].HostPath
		if hp == nil || paths[hp.Path] == "" {
			t.Fatalf("deploy/install: volume %s: no test path for %+v", pod.Spec.Volumes[i].Name, hp)
		}
		hp.Path = paths[hp.Path]
	}
	c := &pod.Spec.Containers[0]
	for i := range c.VolumeMounts {
		// The CNI bin dir stays at /opt/cni/bin in the container, where
		// `checkpointd install` writes by default (nothing the installer
		// writes names it); every other path is named in the static pod or
		// in checkpointd's settings, so the container sees it at the node's path.
		if m := &c.VolumeMounts[i]; m.MountPath != "/opt/cni/bin" && paths[m.MountPath] != "" {
			m.MountPath = paths[m.MountPath]
		}
	}
	old := c.Image
	c.Image = img.ref
	for i, a := range c.Args {
		if a == "--image="+old {
			c.Args[i] = "--image=" + img.ref
		}
	}
	env := []corev1.EnvVar{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "CHECKPOINTD_") || e.Name == "CHECKPOINTD_READY_FILE" {
			env = append(env, e) // NODE_NAME from the downward API, the installer's own ready file
		}
	}
	for _, kv := range n.checkpointdEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "CHECKPOINTD_KUBELET_CONFIG" { // the installer pod does not mount the kubelet's config
			k, v = "CHECKPOINTD_STATIC_POD_DIR", n.staticPodDir()
		}
		env = append(env, corev1.EnvVar{Name: k, Value: v})
	}
	c.Env = env
	n.createPod(pod)
	eventually(t, "installer pod Ready (done)", 3*time.Minute, time.Second, func() (bool, string) {
		n.failIfInstallerExited()
		p, err := n.client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podReady(p), fmt.Sprintf("phase %s, conditions %v", p.Status.Phase, p.Status.Conditions)
	})
}

// waitInstalled waits until the node runs img's plugin and img's
// checkpointd as a static pod answering on its health endpoint at healthAddr.
func (n *node) waitInstalled(img image, healthAddr string) {
	n.t.Helper()
	eventually(n.t, img.version+" installed on "+n.name, 3*time.Minute, time.Second, func() (bool, string) {
		return n.installed(img, healthAddr)
	})
}

// installed reports whether the node's CNI bin dir holds img's plugin (a
// regular file that runs) and img's checkpointd runs as the node's static
// pod, Running and healthy at healthAddr; it fails the test with the
// installer's output when the installer container exited.
func (n *node) installed(img image, healthAddr string) (bool, string) {
	n.t.Helper()
	n.failIfInstallerExited()
	plugin := filepath.Join(n.cniBinDir, contract.PluginType)
	if v, err := pluginVersion(plugin); err != nil || !strings.Contains(v, img.version) {
		return false, fmt.Sprintf("%s version: %q %v", plugin, v, err)
	}
	p, err := n.client.CoreV1().Pods(install.PodNamespace).Get(context.Background(), install.PodName+"-"+n.name, metav1.GetOptions{})
	if err != nil {
		return false, "mirror pod: " + err.Error()
	}
	if p.Spec.Containers[0].Image != img.ref || p.Status.Phase != corev1.PodRunning {
		return false, fmt.Sprintf("mirror pod image %s phase %s", p.Spec.Containers[0].Image, p.Status.Phase)
	}
	resp, err := n.httpClient().Get("http://" + healthAddr + "/healthz")
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, "checkpointd /healthz: " + resp.Status
}

// pluginVersion runs `stickyip version` of the plugin at path, which must
// be a regular file (the installer renames a complete file into place).
func pluginVersion(path string) (string, error) {
	if st, err := os.Lstat(path); err != nil {
		return "", err
	} else if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: mode %s, want a regular file", path, st.Mode())
	}
	return harness.Run(nil, path, "version")
}

// failIfInstallerExited fails the test with the installer container's own
// output (read through the API with the admin credentials) once the
// installer pod on this node has exited: `install --wait` exits only when
// the install failed.
func (n *node) failIfInstallerExited() {
	t := n.t
	t.Helper()
	ctx := context.Background()
	pods, err := n.client.CoreV1().Pods(installerNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: installerSelector, FieldSelector: "spec.nodeName=" + n.name})
	if err != nil {
		return
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil { // a rollout's old pod stops on SIGTERM
			n.failIfExited(&pods.Items[i])
		}
	}
}

// failIfExited fails the test with the output of installer pod p's
// container once it has exited.
func (n *node) failIfExited(p *corev1.Pod) {
	t := n.t
	t.Helper()
	ctx := context.Background()
	if len(p.Status.ContainerStatuses) == 0 {
		return
	}
	cs := p.Status.ContainerStatuses[0]
	term := cs.LastTerminationState.Terminated
	previous := true
	if cs.State.Terminated != nil {
		term, previous = cs.State.Terminated, false
	}
	if term == nil {
		return
	}
	logs, err := n.client.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, Previous: previous}).DoRaw(ctx)
	if err != nil {
		// The API server may not reach this node's kubelet (here pods/log
		// answers "an error on the server"): read the kubelet's log files.
		files, _ := filepath.Glob(filepath.Join(n.podLogsDir(), p.Namespace+"_"+p.Name+"_*", cs.Name, "*.log"))
		logs = []byte(fmt.Sprintf("(through the API: %v; the kubelet's files %v)\n", err, files))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			logs = append(logs, b...)
		}
	}
	t.Fatalf("installer container %s of %s/%s exited with status %d (%s, %d restarts):\n%s",
		cs.Name, p.Namespace, p.Name, term.ExitCode, term.Reason, cs.RestartCount, logs)
}

// ipOf returns the IP stickyip list shows allocated to namespace/name.
func ipOf(entries []admin.Entry, id string) string {
	for _, e := range entries {
		if e.Namespace+"/"+e.Name == id && e.State == "allocated" {
			return e.IP
		}
	}
	return ""
}

// reservationOf returns the reservation of namespace/name, if any.
func reservationOf(entries []admin.Entry, id string) *admin.Entry {
	for i, e := range entries {
		if e.Namespace+"/"+e.Name == id && e.State == "reserved" {
			return &entries[i]
		}
	}
	return nil
}

// removeAll removes dir and everything in it as `rm -rf` does, on a
// directory other processes may write into meanwhile: when one put a file
// back after rm read the directory, rm removes what it saw and leaves the
// directory ("Directory not empty"); removeAll then returns the names left
// (nil when the directory is gone). Any other error fails the test.
func removeAll(t testing.TB, dir string) []string {
	t.Helper()
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Fatal(err)
	}
	entries, rerr := os.ReadDir(dir)
	if rerr != nil {
		t.Fatalf("%v; then reading what is left: %v", err, rerr)
	}
	left := []string{}
	for _, e := range entries {
		left = append(left, e.Name())
	}
	return left
}
