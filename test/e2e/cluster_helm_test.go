//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/install"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The releases of the helm step, as docs/install.md names them.
const (
	flannelRelease  = "flannel"
	stickyipRelease = "stickyip"
)

// helmJourney is the Helm install on the install step's cluster, which that step
// left as docs/install.md's uninstall does (kube-flannel.yml's flannel on
// host-local, nothing of stickyip on the nodes): the way Helm users run
// flannel and stickyip, with the pinned Helm 4.
//
//  1. flannel from its own chart: kube-flannel.yml deleted, chart/kube-flannel
//     of the same flannel module installed (`helm install --wait`; values:
//     the offline images and, as for kube-flannel.yml, cniVersion 0.3.1 in
//     its cni-conf.json for the offline flannel plugin); both nodes lease
//     their subnet again and run its host-local conflist.
//  2. `helm install --wait` of deploy/helm/stickyip: the plugin and
//     checkpointd's static pod on both nodes once it returns.
//  3. flannel switched as docs/install.md says for its chart (helm upgrade
//     --reuse-values -f deploy/kube-flannel/values.yaml, then a rollout
//     restart): each node's conflist is that file's cniConf, the shipped
//     conflist; a sticky pod per node leaves a reservation.
//  4. flannel upgraded with a changed value (--reuse-values --set
//     flannel.resources…): its pods are replaced, the nodes still run
//     stickyip's conflist, and each sticky pod created again gets its IP
//     back.
//  5. `helm upgrade --wait` of stickyip to the second build while pods are
//     created on both nodes: node by node, the plugin runnable at every
//     look, every pod started with no failed sandbox.
//  6. the switch undone: an upgrade of flannel with a changed value that
//     forgets deploy/kube-flannel/values.yaml (no --reuse-values) puts the
//     chart's host-local conflist back on both nodes while the stores hold
//     reservations; each node's checkpointd says so: the gauge, a
//     StickyipNotConfigured Event on its Node, the warning in its log.
//     Switched again as documented: StickyipConfigured, the gauge back to
//     nothing, and the reservations are still there.
//  7. the uninstall of docs/install.md with Helm: conflist back, the pods
//     started with stickyip deleted, helm upgrade --set uninstall=true
//     --wait, helm uninstall: plugin, static pod and checkpointd's files gone,
//     the IPAM store kept.
func (c *cluster) helmJourney() {
	t := c.t
	if len(c.installImages) != 2 {
		t.Fatal("the install step built no images (it must run first)")
	}
	v1, v2 := c.installImages[0], c.installImages[1]
	for _, n := range c.nodes {
		// The install step put the binary back on node2 to tear a pod
		// down after the uninstall; its operator removes it then.
		if err := os.Remove(filepath.Join(n.cniBinDir, contract.PluginType)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(n.staticPodDir(), install.ManifestName)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: checkpointd's static pod before the helm step: %v, want none (the install step ends uninstalled)", n.name, err)
		}
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	h := &helmRun{c: c, chart: filepath.Join(root, "deploy", "helm", "stickyip"),
		values: filepath.Join(root, "deploy", "kube-flannel", "values.yaml"), fl: c.newFlannelChart(harness.ShortTempDir(t))}
	took := map[string]time.Duration{}
	timed := func(name string, f func()) {
		start := time.Now()
		f()
		took[name] = time.Since(start).Round(100 * time.Millisecond)
	}
	timed("flannel-chart", h.flannelFromChart)
	timed("install", func() { h.install(v1) })
	timed("switch", h.switchFlannel)
	reserved := c.reserveOnEachNode()
	timed("flannel-upgrade", func() { h.upgradeFlannel(reserved) })
	timed("upgrade", func() { h.upgrade(v1, v2) })
	for _, n := range c.nodes {
		n.deletePodGracefully("sticky-"+n.name, 2*time.Minute) // reserved again
	}
	timed("undo-noticed", h.undo)
	timed("redo-said", func() { h.redo(reserved) })
	timed("uninstall", h.uninstall)
	for _, n := range c.nodes {
		removeContents(t, n.stickyipDataDir())
	}
	t.Logf("helm step: flannel from its chart %s; helm install --wait %s; switch %s; flannel upgrade with a changed value and the sticky pods back %s; stickyip upgrade while pods start %s; undo noticed on both nodes %s; fixed and said %s; uninstall %s",
		took["flannel-chart"], took["install"], took["switch"], took["flannel-upgrade"], took["upgrade"], took["undo-noticed"], took["redo-said"], took["uninstall"])
}

// helmRun is the helm step's state: the cluster, stickyip's chart,
// deploy/kube-flannel/values.yaml, flannel's chart, and stickyip's
// cni-conf.json as kube-flannel's ConfigMap holds it once switched.
type helmRun struct {
	c             *cluster
	chart, values string
	fl            *flannelChart
	ours          string
}

// flannelFromChart replaces kube-flannel.yml by flannel's own chart (1.).
func (h *helmRun) flannelFromChart() {
	c, t := h.c, h.c.t
	t.Logf("kubectl delete -f kube-flannel.yml:\n%s", c.kubectl("delete", "-f", c.kubeFlannelFile, "--timeout=3m"))
	t.Logf("helm install flannel (%s, offline values):\n%s", h.fl.chart, h.fl.upgrade("install", "--create-namespace", "-f", h.fl.offline))
	c.waitFlannelRollout()
	for _, n := range c.nodes {
		if l := n.waitLease(time.Minute); l.Subnet.String() != n.subnet {
			t.Fatalf("%s: flanneld of the chart leased %s, the node had %s", n.name, l.Subnet, n.subnet)
		}
	}
	c.waitConflists(c.kubeFlannelConfig()["cni-conf.json"], time.Minute)
}

// install is `helm install --wait` of stickyip's chart with img (2.).
func (h *helmRun) install(img image) {
	c, t := h.c, h.c.t
	repo, tag, _ := strings.Cut(img.ref, ":")
	start := time.Now()
	t.Logf("helm install stickyip --wait:\n%s", c.helm("install", stickyipRelease, h.chart, "-n", installerNamespace,
		"--set", "image.repository="+repo+",image.tag="+tag, "--wait", "--timeout=4m"))
	returned := time.Since(start)
	installed := c.waitInstalled(img, start)
	ds, err := c.client.AppsV1().DaemonSets(installerNamespace).Get(context.Background(), "stickyip", metav1.GetOptions{})
	if err != nil || ds.Annotations["meta.helm.sh/release-name"] != stickyipRelease {
		t.Fatalf("DaemonSet %s/stickyip after helm install: %v, annotations %v", installerNamespace, err, ds.Annotations)
	}
	t.Logf("helm install --wait returned in %s; from its start, each node ran %s's plugin and a healthy checkpointd after node1 %s, node2 %s", returned.Round(100*time.Millisecond),
		img.version, installed["node1"].Round(100*time.Millisecond), installed["node2"].Round(100*time.Millisecond))
}

// switchFlannel switches flannel's chart to stickyip as docs/install.md
// says (3.).
func (h *helmRun) switchFlannel() {
	c := h.c
	h.fl.upgrade("upgrade", "--reuse-values", "-f", h.values)
	c.restartKubeFlannel()
	h.ours = c.kubeFlannelConfig()["cni-conf.json"]
	c.requireShippedConflist(h.ours)
	c.waitConflists(h.ours, time.Minute)
}

// upgradeFlannel upgrades flannel with a changed value, as documented
// (--reuse-values): its pods are replaced, the nodes keep stickyip, and
// each sticky pod gets its reserved IP back (4.).
func (h *helmRun) upgradeFlannel(reserved map[string]string) {
	c, t := h.c, h.c.t
	before := c.flannelPodUIDs()
	h.fl.upgrade("upgrade", "--reuse-values", "--set", "flannel.resources.requests.cpu=60m")
	c.waitFlannelRollout()
	if after := c.flannelPodUIDs(); after["node1"] == before["node1"] || after["node2"] == before["node2"] {
		t.Fatalf("flannel's pods after the upgrade with a changed value: %v, before %v: not replaced on every node", after, before)
	}
	c.waitConflists(h.ours, time.Minute)
	c.comeBackOnEachNode(reserved)
	t.Logf("flannel upgraded (--reuse-values, requests.cpu 60m): its pods replaced on both nodes, both conflists still stickyip's, each sticky pod created again got its IP back (%v)", reserved)
}

// upgrade is `helm upgrade --wait` of stickyip from one image to another
// while pods start (5.).
func (h *helmRun) upgrade(from, to image) {
	c, t := h.c, h.c.t
	_, tag, _ := strings.Cut(to.ref, ":")
	up := c.upgradeWhilePodsStart(from, to,
		func() {
			c.helm("upgrade", stickyipRelease, h.chart, "-n", installerNamespace, "--reuse-values", "--set", "image.tag="+tag, "--dry-run=server")
		},
		func() {
			t.Logf("helm upgrade stickyip --wait:\n%s", c.helm("upgrade", stickyipRelease, h.chart, "-n", installerNamespace,
				"--reuse-values", "--set", "image.tag="+tag, "--wait", "--timeout=4m"))
		})
	for _, p := range up.created {
		c.node(p.node).deletePodNow(p.name)
	}
	t.Logf("helm upgrade %s → %s: %s", from.version, to.version, up)
}

// undo upgrades flannel with a changed value but without
// deploy/kube-flannel/values.yaml: host-local is back on both nodes while
// they hold reservations, and each node's checkpointd says so (6.).
func (h *helmRun) undo() {
	c, t := h.c, h.c.t
	start := time.Now()
	h.fl.upgrade("upgrade", "-f", h.fl.offline, "--set", "flannel.resources.requests.cpu=70m")
	c.waitFlannelRollout()
	c.waitConflists(c.kubeFlannelConfig()["cni-conf.json"], time.Minute)
	if c.kubeFlannelConfig()["cni-conf.json"] == h.ours {
		t.Fatal("the upgrade without deploy/kube-flannel/values.yaml kept stickyip's cni-conf.json: the undo proved nothing")
	}
	for _, n := range c.nodes {
		n.waitUnconfiguredSaid(start)
	}
}

// redo switches flannel back to stickyip as documented: each node's
// checkpointd says so, and the reservations are still there (6.).
func (h *helmRun) redo(reserved map[string]string) {
	c, t := h.c, h.c.t
	start := time.Now()
	h.fl.upgrade("upgrade", "--reuse-values", "-f", h.values)
	c.restartKubeFlannel()
	c.waitConflists(h.ours, time.Minute)
	for _, n := range c.nodes {
		n.waitConfiguredSaid(start)
		if r := reservationOf(n.stickyipList(t), "default/sticky-"+n.name); r == nil || r.IP != reserved[n.name] {
			t.Fatalf("%s: default/sticky-%s's reservation after the undo and the fix: %+v, want %s", n.name, n.name, r, reserved[n.name])
		}
	}
}

// uninstall is docs/install.md's uninstall with Helm (7.).
func (h *helmRun) uninstall() {
	c, t := h.c, h.c.t
	h.fl.upgrade("upgrade", "--reuse-values", "--set-file", "flannel.cniConf="+h.fl.offlineConf)
	c.restartKubeFlannel()
	c.waitConflists(c.kubeFlannelConfig()["cni-conf.json"], time.Minute)
	for _, n := range c.nodes {
		eventually(t, n.name+": no stickyip allocation left", 3*time.Minute, 2*time.Second, func() (bool, string) {
			_, allocated := countStates(n.stickyipList(t))
			return allocated == 0, fmt.Sprintf("%d allocated", allocated)
		})
	}
	t.Logf("helm upgrade --set uninstall=true --wait:\n%s", c.helm("upgrade", stickyipRelease, h.chart, "-n", installerNamespace,
		"--reuse-values", "--set", "uninstall=true", "--wait", "--timeout=4m"))
	t.Logf("helm uninstall:\n%s", c.helm("uninstall", stickyipRelease, "-n", installerNamespace, "--wait", "--timeout=3m"))
	c.requireUninstalled()
	if out := c.helm("list", "-n", installerNamespace, "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("helm list -n %s after helm uninstall: %q", installerNamespace, out)
	}
}

// flannelChart is flannel's own chart (chart/kube-flannel of the flannel
// module the e2e builds) and the values this cluster needs besides a
// user's: the offline images, and its cni-conf.json with cniVersion 0.3.1
// (offlineFlannelConf: the offline flannel plugin refuses 1.0.0).
type flannelChart struct {
	c                           *cluster
	chart, offline, offlineConf string
}

// newFlannelChart writes the offline values into dir.
func (c *cluster) newFlannelChart(dir string) *flannelChart {
	t := c.t
	t.Helper()
	fl := &flannelChart{c: c, chart: filepath.Join(flannelModuleDir(t), "chart", "kube-flannel")}
	b, err := os.ReadFile(filepath.Join(fl.chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults struct {
		Flannel struct {
			CNIConf string `json:"cniConf"`
		} `json:"flannel"`
	}
	if err := yaml.Unmarshal(b, &defaults); err != nil {
		t.Fatal(err)
	}
	const from, to = `"cniVersion": "1.0.0"`, `"cniVersion": "0.3.1"`
	if strings.Count(defaults.Flannel.CNIConf, from) != 1 {
		t.Fatalf("flannel's chart's cniConf does not name %s once (a new chart: check what the offline flannel plugin accepts):\n%s", from, defaults.Flannel.CNIConf)
	}
	conf := strings.Replace(defaults.Flannel.CNIConf, from, to, 1)
	image := func(ref string) map[string]string {
		repo, tag, _ := strings.Cut(ref, ":")
		return map[string]string{"repository": repo, "tag": tag}
	}
	values := map[string]any{"flannel": map[string]any{
		"image":       image(harness.FlannelImage),
		"flannel_cni": map[string]any{"image": image(harness.FlannelCNIPluginImage)},
		"cniConf":     conf,
	}}
	out, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	fl.offline, fl.offlineConf = filepath.Join(dir, "flannel-offline.yaml"), filepath.Join(dir, "flannel-cni-conf.json")
	writeFile(t, fl.offline, out, 0o644)
	writeFile(t, fl.offlineConf, []byte(conf), 0o644)
	return fl
}

// upgrade runs `helm <verb> flannel <chart> -n kube-flannel <args> --wait`
// (verb install or upgrade) and returns its output.
func (fl *flannelChart) upgrade(verb string, args ...string) string {
	fl.c.t.Helper()
	argv := append([]string{verb, flannelRelease, fl.chart, "-n", flannelNamespace}, args...)
	return fl.c.helm(append(argv, "--wait", "--timeout=4m")...)
}

// requireShippedConflist fails the test unless conf (kube-flannel's
// cni-conf.json) is conf/10-flannel-stickyip.conflist with ipam.newStoreWait
// deploy.NewStoreWait (deploy/kube-flannel's).
func (c *cluster) requireShippedConflist(conf string) {
	t := c.t
	t.Helper()
	var got, want any
	if err := json.Unmarshal([]byte(conf), &got); err != nil {
		t.Fatalf("kube-flannel's cni-conf.json: %v\n%s", err, conf)
	}
	if err := json.Unmarshal(harness.ShippedConfig(t, "10-flannel-stickyip.conflist"), &want); err != nil {
		t.Fatal(err)
	}
	want.(map[string]any)["plugins"].([]any)[0].(map[string]any)["ipam"].(map[string]any)["newStoreWait"] = deploy.NewStoreWait
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kube-flannel's cni-conf.json after the switch is not conf/10-flannel-stickyip.conflist:\n%s", conf)
	}
}

// flannelPodUIDs returns the UID of flannel's running pod on each node.
func (c *cluster) flannelPodUIDs() map[string]string {
	out := map[string]string{}
	for _, n := range c.nodes {
		out[n.name] = string(c.flannelPod(n).UID)
	}
	return out
}

// reserveOnEachNode creates sticky-<node> (a 30 minute reservation) on
// each node, deletes it, and returns the address each node now reserves.
func (c *cluster) reserveOnEachNode() map[string]string {
	t := c.t
	t.Helper()
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
	return reserved
}

// comeBackOnEachNode creates sticky-<node> again on each node and fails the
// test unless it gets its reserved address.
func (c *cluster) comeBackOnEachNode(reserved map[string]string) {
	t := c.t
	t.Helper()
	for _, n := range c.nodes {
		name := "sticky-" + n.name
		n.createPod(n.podOn(name, map[string]string{annReservation: "30"}))
		if ip := n.waitAPIPodRunning(name, 2*time.Minute); ip != reserved[n.name] {
			t.Fatalf("%s: default/%s created again got %s, want its reserved %s", n.name, name, ip, reserved[n.name])
		}
	}
}

// waitUnconfiguredSaid waits until the node's installed checkpointd says
// that the CNI configuration no longer uses stickyip for cbr0 while its
// store holds a reservation: the gauge, the Warning Event on its Node
// (after since), the warning in its log.
func (n *node) waitUnconfiguredSaid(since time.Time) {
	t := n.t
	t.Helper()
	const gauge = `checkpointd_ipam_unconfigured_sticky_ips{network="cbr0"}`
	eventually(t, n.name+": checkpointd says cbr0 is no longer stickyip's", 2*time.Minute, 2*time.Second, func() (bool, string) {
		v, err := n.shippedMetric(gauge)
		if err != nil || v != "1" {
			return false, fmt.Sprintf("%s = %q (%v)", gauge, v, err)
		}
		evs := n.nodeEventsSince(reconcile.EventNotConfigured, since)
		if len(evs) == 0 {
			return false, "no " + reconcile.EventNotConfigured + " Event on the Node yet"
		}
		if msg := evs[0].Message; evs[0].Type != corev1.EventTypeWarning || !strings.Contains(msg, "network cbr0") || !strings.Contains(msg, "IPAM host-local") {
			t.Fatalf("%s: %s Event: %s %q", n.name, reconcile.EventNotConfigured, evs[0].Type, msg)
		}
		if !n.checkpointdLogSays("the CNI configuration no longer uses stickyip") {
			return false, "no warning in checkpointd's log yet"
		}
		n.t.Logf("%s: %s = 1; Event %s: %s", n.name, gauge, reconcile.EventNotConfigured, evs[0].Message)
		return true, ""
	})
}

// waitConfiguredSaid waits until the node's checkpointd says the CNI
// configuration uses stickyip again: the gauge gone, the Normal Event.
func (n *node) waitConfiguredSaid(since time.Time) {
	t := n.t
	t.Helper()
	eventually(t, n.name+": checkpointd says cbr0 is stickyip's again", 2*time.Minute, 2*time.Second, func() (bool, string) {
		lines, err := n.shippedMetricLines("checkpointd_ipam_unconfigured_sticky_ips{")
		if err != nil || lines != "" {
			return false, fmt.Sprintf("gauge %q (%v)", lines, err)
		}
		if len(n.nodeEventsSince(reconcile.EventConfigured, since)) == 0 {
			return false, "no " + reconcile.EventConfigured + " Event on the Node yet"
		}
		return true, ""
	})
}

// nodeEventsSince returns the Events of the node's Node with reason
// recorded after since.
func (n *node) nodeEventsSince(reason string, since time.Time) []corev1.Event {
	var out []corev1.Event
	for _, e := range n.eventList(context.Background(), "default", "involvedObject.kind=Node,involvedObject.name="+n.name+",reason="+reason) {
		if !e.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
			out = append(out, e)
		}
	}
	return out
}

// shippedMetricLines returns the lines of the installed checkpointd's
// /metrics (at shippedCheckpointdAddr) that start with prefix.
func (n *node) shippedMetricLines(prefix string) (string, error) {
	resp, err := n.httpClient().Get("http://" + shippedCheckpointdAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n"), nil
}

// shippedMetric reads one sample of the installed checkpointd's /metrics.
func (n *node) shippedMetric(name string) (string, error) {
	lines, err := n.shippedMetricLines(name + " ")
	if err != nil {
		return "", err
	}
	if f := strings.Fields(lines); len(f) == 2 {
		return f[1], nil
	}
	return "", fmt.Errorf("metric %s not exposed", name)
}

// checkpointdLogSays reports whether the installed checkpointd's log (its
// static pod's container logs, by the kubelet) holds text.
func (n *node) checkpointdLogSays(text string) bool {
	files, _ := filepath.Glob(filepath.Join(n.podLogsDir(), install.PodNamespace+"_"+install.PodName+"-"+n.name+"_*", "checkpointd", "*.log"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), text) {
			return true
		}
	}
	return false
}

// requireUninstalled fails the test unless stickyip is gone from both
// nodes as the uninstall leaves them: no plugin, no static pod (manifest,
// process, mirror pod), none of checkpointd's files, the IPAM store kept,
// the DaemonSet gone and kube-system untouched.
func (c *cluster) requireUninstalled() {
	t := c.t
	t.Helper()
	ctx := context.Background()
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
			_, err := c.client.CoreV1().Pods(install.PodNamespace).Get(ctx, install.PodName+"-"+n.name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	if _, err := c.client.AppsV1().DaemonSets(installerNamespace).Get(ctx, "stickyip", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("DaemonSet %s/stickyip after the uninstall: %v, want it gone", installerNamespace, err)
	}
	if ns, err := c.client.CoreV1().Namespaces().Get(ctx, installerNamespace, metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("namespace %s after the uninstall: %v, want it untouched", installerNamespace, err)
	}
}
