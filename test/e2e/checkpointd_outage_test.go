//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// copyManifest is the static manifest checkpointd writes for ns/name.
func (n *node) copyManifest(ns, name string) string {
	m, _ := filepath.Glob(filepath.Join(n.staticPodDir(), "stickyip-checkpoint-"+ns+"_"+name+".*"))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// checkpointdCleanup runs `checkpointd cleanup` with the daemon's settings,
// as the unit's ExecStopPost does after every stop, crash included.
func (n *node) checkpointdCleanup() {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(n.bins.project, "checkpointd"), "cleanup")
	cmd.Env = append(os.Environ(), n.checkpointdEnv()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("checkpointd cleanup: %v: %s", err, out)
	}
}

// reads runs the harness image's read check inside a running container:
// the file must be readable by the container's user and not empty.
func (n *node) reads(ctx context.Context, containerID, file string) error {
	resp, err := n.cri.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: containerID,
		Cmd: []string{"/pause", "-read", file, "-exit"}, Timeout: 10})
	if err != nil {
		return err
	}
	if resp.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s%s", resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return nil
}

// TestCheckpointdOutage is checkpointd through a long API outage, on real components:
//
//   - a partition longer than a ReplicaSet pod's toleration, then a reboot:
//     the ReplicaSet pod is not restored (its controller may run it
//     elsewhere), the StatefulSet pod and the bare pod are;
//   - checkpointd restarted (SIGTERM) and killed (-9) during the outage,
//     each followed by the unit's `checkpointd cleanup`: the copies keep
//     running, with their secret file readable inside, the same sandbox,
//     and the same manifest back;
//   - a narrowed policy (a typo) during the outage keeps every checkpoint;
//   - checkpointd disabled while copies run: once the API server is back
//     the parents are not blocked beyond the kubelet's own delay.
func TestCheckpointdOutage(t *testing.T) {
	n := runningCheckpointdNode(t)
	ctx := context.Background()

	cs := n.client.CoreV1()
	if _, err := cs.Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cred", Namespace: "kube-system"},
		Data: map[string][]byte{"password": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs: the owners are references only, as the
	// controllers would set them. Every pod tolerates the node's
	// unreachable and not-ready taints for 20 s.
	const toleration = 20 * time.Second
	yes := true
	owners := map[string][]metav1.OwnerReference{
		"rs":   {{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-6d4b", UID: "00000000-0000-0000-0000-000000000001", Controller: &yes}},
		"sts":  {{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "00000000-0000-0000-0000-000000000002", Controller: &yes}},
		"bare": nil,
	}
	ips := map[string]string{}
	for name, refs := range owners {
		p := podSpec("kube-system", name, map[string]string{annCheckpoint: "true", annReservation: "30"}, "-read", "/cred/password")
		p.OwnerReferences = refs
		secs := int64(toleration / time.Second)
		for _, key := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs})
		}
		p.Spec.Volumes = []corev1.Volume{{Name: "cred", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cred"}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cred", MountPath: "/cred"}}
		n.createPod(p)
	}
	for name := range owners {
		ips[name] = n.waitPodRunningIn("kube-system", name, 3*time.Minute)
	}
	eventually(t, "checkpoints saved and the API contact recorded", time.Minute, time.Second, func() (bool, string) {
		for _, p := range []string{n.checkpointFile("kube-system", "rs"), n.checkpointFile("kube-system", "sts"),
			n.checkpointFile("kube-system", "bare"), filepath.Join(n.checkpointDir(), "api-contact")} {
			if _, err := os.Stat(p); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	t.Logf("running and saved: %v", ips)

	// ---- A partition longer than the toleration, then a reboot.
	n.stopAPIServer()
	partition := toleration + 10*time.Second
	time.Sleep(partition)
	n.powerOff()
	n.powerOn()
	copies := map[string]string{} // name -> main container of its copy
	for _, name := range []string{"sts", "bare"} {
		_, copies[name] = n.copyRuns(ctx, "kube-system", name, ips[name], 3*time.Minute, false)
		if err := n.reads(ctx, copies[name], "/cred/password"); err != nil {
			t.Fatalf("copy of %s cannot read its secret: %v", name, err)
		}
	}
	t.Logf("after a partition of %s (toleration %s) and a reboot: sts and bare restored, their secret readable inside", partition, toleration)
	// Restoring rs, were checkpointd to, is what a pass after these does.
	n.waitPasses(2, "after sts and bare were restored")
	if m := n.copyManifest("kube-system", "rs"); m != "" {
		t.Errorf("the ReplicaSet pod was restored after a partition longer than its toleration: %s", m)
	}
	if sbs, _ := n.staticCopies(ctx, "kube-system", "rs"); len(sbs) > 0 {
		t.Errorf("a copy of the ReplicaSet pod runs: %+v", sbs)
	}
	if _, err := os.Stat(n.checkpointFile("kube-system", "rs")); err != nil {
		t.Errorf("the ReplicaSet pod's checkpoint is gone: %v", err)
	}

	// ---- checkpointd restarted, then killed, during the outage.
	manifest, err := os.ReadFile(n.copyManifest("kube-system", "bare"))
	if err != nil {
		t.Fatal(err)
	}
	sandboxes := map[string]string{}
	for _, name := range []string{"sts", "bare"} {
		sandboxes[name], _ = n.copyRuns(ctx, "kube-system", name, ips[name], time.Minute, false)
	}
	for _, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		n.checkpointd.stop(t, stop, 30*time.Second)
		n.checkpointdCleanup()
		if m := n.copyManifest("kube-system", "bare"); m != "" {
			t.Errorf("after %s and cleanup the manifest %s is still there", stop, m)
		}
		for _, name := range []string{"sts", "bare"} {
			if err := n.reads(ctx, copies[name], "/cred/password"); err != nil {
				t.Fatalf("after %s and cleanup the copy of %s cannot read its secret: %v", stop, name, err)
			}
		}
		started := time.Now()
		mark := n.kubeletLogMark()
		n.startCheckpointd()
		eventually(t, "the copy's manifest written back", time.Minute, time.Second, func() (bool, string) {
			m := n.copyManifest("kube-system", "bare")
			if m == "" {
				return false, "no manifest"
			}
			data, err := os.ReadFile(m)
			return err == nil && bytes.Equal(data, manifest), fmt.Sprintf("manifest %s differs (%v)", m, err)
		})
		back := time.Since(started)
		// The kubelet sees the manifests again (its file source: "SyncLoop
		// ADD"), then syncs each copy in a periodic resync, where it would
		// restart one it took for another pod (not a fixed sleep).
		pods := make([]kubeletPod, 0, 2)
		for _, name := range []string{"sts", "bare"} {
			pods = append(pods, n.sandboxPod(ctx, sandboxes[name]))
		}
		seen := mark
		for _, p := range pods {
			seen = max(seen, n.waitKubeletLine(mark, "its file source adding "+p.ref+" again", time.Minute, func(l string) bool {
				return strings.Contains(l, `"SyncLoop ADD" source="file"`) && strings.Contains(l, `"`+p.ref+`"`)
			}))
		}
		n.waitKubeletResynced(seen, pods, "both copies after their manifests came back", 2*kubeletSyncFrequency+30*time.Second)
		for _, name := range []string{"sts", "bare"} {
			sb, main := n.copyRuns(ctx, "kube-system", name, ips[name], time.Minute, false)
			if sb != sandboxes[name] || main != copies[name] {
				t.Errorf("after %s the copy of %s was restarted (sandbox %s, was %s; container %s, was %s)", stop, name, sb, sandboxes[name], main, copies[name])
			}
			if err := n.reads(ctx, main, "/cred/password"); err != nil {
				t.Errorf("after %s the copy of %s cannot read its secret: %v", stop, name, err)
			}
		}
		t.Logf("checkpointd %s + cleanup during the outage: copies kept running with their files; same manifest back %s after the start (grace %s)",
			stop, back.Round(time.Second), checkpointdGrace)
	}

	// ---- A narrowed policy (a typo) during the outage deletes nothing.
	n.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
	n.checkpointdCleanup()
	narrowed := time.Now()
	n.startCheckpointd("CHECKPOINTD_ALLOW_NAMESPACES=kube-sytem")
	// What checkpointd decides is timed from its start (the API server
	// away for its grace period, twice over); then passes that saw it all
	// (a sleep of that length alone proves no pass).
	time.Sleep(time.Until(narrowed.Add(2 * checkpointdGrace)))
	n.waitPasses(3, fmt.Sprintf("%s after checkpointd started with the narrowed policy", 2*checkpointdGrace))
	for _, name := range []string{"rs", "sts", "bare"} {
		if _, err := os.Stat(n.checkpointFile("kube-system", name)); err != nil {
			t.Errorf("checkpoint of %s gone under a narrowed policy during the outage: %v", name, err)
		}
		if m := n.copyManifest("kube-system", name); m != "" {
			t.Errorf("a pod the policy refuses has a manifest: %s", m)
		}
	}
	for _, name := range []string{"sts", "bare"} {
		if err := n.reads(ctx, copies[name], "/cred/password"); err != nil {
			t.Errorf("copy of %s lost its files under the narrowed policy: %v", name, err)
		}
	}
	t.Log("narrowed policy during the outage: every checkpoint kept, nothing restored, running copies keep their files")
	n.checkpointd.stop(t, syscall.SIGTERM, 30*time.Second)
	n.checkpointdCleanup()

	// ---- checkpointd disabled with copies running: the API server comes back.
	apiBack := time.Now()
	n.startAPIServer()
	for _, name := range []string{"sts", "bare"} {
		n.waitHandedBack(ctx, "kube-system", name, ips[name], 2*time.Minute)
		t.Logf("checkpointd disabled: API pod %s runs with %s %s after the API server came back", name, ips[name], time.Since(apiBack).Round(time.Second))
	}
	ip := n.waitPodRunningIn("kube-system", "rs", 2*time.Minute)
	t.Logf("the ReplicaSet pod, never restored, runs as its API pod with %s (had %s)", ip, ips["rs"])
	if d := time.Since(apiBack); d > 90*time.Second {
		t.Errorf("parents blocked for %s after the API server came back with checkpointd disabled", d)
	}
}
