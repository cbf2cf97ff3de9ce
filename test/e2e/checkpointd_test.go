//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	annCheckpoint   = "stickyip.io/checkpoint"
	annCheckpointOf = "stickyip.io/checkpoint-of"
	annReservation  = "io.kubernetes.cri/reserved-ip-duration"
	annConfigSource = "kubernetes.io/config.source"

	// checkpointdGrace is checkpointd's grace period in this test: how long
	// the API must be unreachable before a restore, and a parent absent
	// before its checkpoint is released.
	checkpointdGrace = 10 * time.Second
	checkpointdAddr  = "127.0.0.1:9477"
)

func (n *node) checkpointDir() string { return filepath.Join(n.dir, "checkpoints") }

// checkpointFile is where checkpointd keeps the record of namespace/name.
func (n *node) checkpointFile(namespace, name string) string {
	return filepath.Join(n.checkpointDir(), namespace+"_"+name+".ckpt")
}

// startCheckpointd starts checkpointd in the node's netns with the kubelet's
// kubeconfig (the systemd-unit way, which works with no API server) and
// waits for its /healthz.
func (n *node) startCheckpointd() {
	t := n.t
	t.Helper()
	n.checkpointd = startProc(t, n.logDir, n.ns.Path, "checkpointd", filepath.Join(n.bins.project, "checkpointd"),
		"--node-name="+nodeName,
		"--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--checkpoint-dir="+n.checkpointDir(),
		"--static-pod-dir="+n.staticPodDir(),
		"--cri-endpoint=unix://"+n.ctd.Address,
		"--volume-dir="+filepath.Join(n.dir, "checkpointd-volumes"),
		"--data-dir="+n.stickyipDataDir(),
		"--cni-conf-dir="+n.cniConfDir(),
		"--grace-period="+checkpointdGrace.String(),
		"--interval=1s", "--api-probe-interval=1s", "--timeout=3s",
		"--listen-address="+checkpointdAddr,
		"--log-level=debug",
	)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.apiClientConfig("").Dial}}
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

// metric reads an unlabelled sample from checkpointd's /metrics.
func (n *node) metric(name string) (string, error) {
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.apiClientConfig("").Dial}}
	resp, err := hc.Get("http://" + checkpointdAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
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

// metricsAre checks unlabelled checkpointd metrics against want.
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

// TestCheckpointRestoreAcrossReboot is issue 4's scenario on real components.
//
//   - keep:  opted in, with a reservation; must come back with its IP while the
//     API server is away, and hand the IP back to its API pod when it returns.
//   - gone:  opted in, deleted in the API while the node is powered off; may be
//     restored while the API is away, must not survive the API's return.
//   - plain: a reservation but no opt-in; never restored as a static pod.
func TestCheckpointRestoreAcrossReboot(t *testing.T) {
	n := newNode(t, nodeOptions{ipam: "stickyip"})
	if _, err := os.Stat(filepath.Join(n.bins.project, "checkpointd")); err != nil {
		if _, err := os.Stat("../../checkpointd/cmd/checkpointd"); err != nil {
			t.Skip("e2e: checkpointd has no source on this branch yet")
		}
		missing(t, "%s missing (make build)", filepath.Join(n.bins.project, "checkpointd"))
	}
	ctx := context.Background()
	n.startControlPlane()
	n.startContainerd()
	n.startKubelet(true)
	n.startCheckpointd()

	optIn := map[string]string{annCheckpoint: "true", annReservation: "30"}
	n.createPod(testPod("keep", optIn))
	n.createPod(testPod("gone", optIn))
	n.createPod(testPod("plain", map[string]string{annReservation: "30"}))
	ipKeep := n.waitAPIPodRunning("keep", 3*time.Minute)
	ipGone := n.waitAPIPodRunning("gone", 2*time.Minute)
	ipPlain := n.waitAPIPodRunning("plain", 2*time.Minute)
	t.Logf("running: keep %s, gone %s, plain %s", ipKeep, ipGone, ipPlain)
	if ipKeep == ipGone || ipKeep == ipPlain || ipGone == ipPlain {
		t.Fatalf("pods share an IP: keep %s, gone %s, plain %s", ipKeep, ipGone, ipPlain)
	}

	eventually(t, "checkpoints of keep and gone saved", time.Minute, time.Second, func() (bool, string) {
		for _, name := range []string{"keep", "gone"} {
			if _, err := os.Stat(n.checkpointFile("default", name)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	if _, err := os.Stat(n.checkpointFile("default", "plain")); !os.IsNotExist(err) {
		t.Errorf("pod plain has no opt-in but has a checkpoint file (stat: %v)", err)
	}

	// The node goes away; meanwhile "gone" is deleted in the API. Then the API
	// server goes away too and the node boots without it.
	n.powerOff()
	n.deletePodNow("gone")
	n.stopAPIServer()
	n.powerOn()

	// Not before the grace period: right after the boot nothing is restored.
	if m, err := filepath.Glob(filepath.Join(n.staticPodDir(), "*")); err != nil || len(m) > 0 {
		if since := time.Since(n.checkpointd.started); since < checkpointdGrace/2 {
			t.Errorf("%s after checkpointd started (grace %s), static pod dir holds %v (err %v)", since, checkpointdGrace, m, err)
		}
	}

	eventually(t, "static copy of keep running with its IP "+ipKeep, 3*time.Minute, time.Second, func() (bool, string) {
		if err := n.checkpointd.exited(); err != nil {
			t.Fatal(err)
		}
		sbs, err := n.staticCopies(ctx, "default", "keep")
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 1 || sbs[0].IP != ipKeep {
			return false, fmt.Sprintf("static copies: %+v", sbs)
		}
		// Both opted-in pods are restored: checkpointd cannot know gone was deleted.
		return n.metricsAre(map[string]string{"checkpointd_api_reachable": "0", "checkpointd_restores_active": "2"})
	})
	t.Logf("static copy of keep runs with %s while the API server is away", ipKeep)
	for _, sb := range mustSandboxesOf(t, n, ctx) {
		if strings.HasPrefix(sb.Name, "plain") || sb.Annotations[annCheckpointOf] == "default/plain" {
			t.Errorf("pod plain (no opt-in) was restored: sandbox %+v", sb)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "*plain*")); len(m) > 0 {
		t.Errorf("pod plain (no opt-in) has a static manifest: %v", m)
	}

	// The API server answers again.
	n.startAPIServer()
	eventually(t, "keep handed back to its API pod with "+ipKeep, 3*time.Minute, 2*time.Second, func() (bool, string) {
		sbs, err := n.staticCopies(ctx, "default", "keep")
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 0 {
			return false, fmt.Sprintf("static copy still running: %+v", sbs)
		}
		p, err := n.client.CoreV1().Pods("default").Get(ctx, "keep", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != ipKeep {
			return false, fmt.Sprintf("API pod keep: phase %s IP %q", p.Status.Phase, p.Status.PodIP)
		}
		api, err := n.readySandboxes(ctx, "default", "keep")
		if err != nil {
			return false, err.Error()
		}
		if len(api) != 1 || api[0].UID != string(p.UID) || api[0].IP != ipKeep {
			return false, fmt.Sprintf("runtime sandboxes of keep: %+v", api)
		}
		return true, ""
	})
	t.Logf("API pod keep runs again with %s", ipKeep)

	// plain was never restored, but once the API is back its pod runs again,
	// and its reservation survived the reboot.
	if got := n.waitAPIPodRunning("plain", 2*time.Minute); got != ipPlain {
		t.Errorf("pod plain came back with %s, want its reserved IP %s", got, ipPlain)
	}

	eventually(t, "deleted pod gone not resurrected", 2*time.Minute, 2*time.Second, func() (bool, string) {
		for _, name := range []string{"gone", "gone-" + nodeName} {
			_, err := n.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("API pod %s: err %v", name, err)
			}
		}
		sbs, err := n.staticCopies(ctx, "default", "gone")
		if err != nil {
			return false, err.Error()
		}
		api, err := n.readySandboxes(ctx, "default", "gone")
		if err != nil {
			return false, err.Error()
		}
		if len(sbs)+len(api) != 0 {
			return false, fmt.Sprintf("gone still runs: static %+v, api %+v", sbs, api)
		}
		if _, err := os.Stat(n.checkpointFile("default", "gone")); !os.IsNotExist(err) {
			return false, fmt.Sprintf("checkpoint of gone still there (stat: %v)", err)
		}
		return n.metricsAre(map[string]string{"checkpointd_api_reachable": "1", "checkpointd_restores_active": "0", "checkpointd_checkpoints": "1"})
	})
}

// mustSandboxesOf lists every ready sandbox on the node.
func mustSandboxesOf(t *testing.T, n *node, ctx context.Context) []sandbox {
	t.Helper()
	pods, err := n.cri.ListPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []sandbox
	for _, p := range pods {
		st, err := n.cri.PodStatus(ctx, p.Id)
		if err != nil || !st.Ready {
			continue
		}
		out = append(out, sandbox{ID: p.Id, Namespace: p.GetMetadata().GetNamespace(), Name: p.GetMetadata().GetName(),
			UID: p.GetMetadata().GetUid(), Ready: true, Annotations: p.Annotations})
	}
	return out
}
