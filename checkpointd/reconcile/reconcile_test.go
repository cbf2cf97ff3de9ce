package reconcile

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	testharness "github.com/stickyip/stickyip/test/harness"
)

// TestRestoreAndHandBack walks the main scenario: save, an outage without a
// reboot (nothing restored), a reboot with the API away (restored after the
// grace period), the API back (handed back only after the stability period;
// files removed only after the copy's sandbox).
func TestRestoreAndHandBack(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)

	// Bound but not running yet: nothing saved.
	h.pass()
	if h.saved(web) != nil {
		t.Fatal("checkpoint before the pod runs")
	}

	// Running: saved, with only the secret key the pod mounts.
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	rec := h.saved(web)
	if rec == nil || string(rec.Secrets["web-tls"]["key"]) != "SECRET" || rec.Pod.UID != "uid-1" {
		t.Fatalf("record = %+v", rec)
	}
	if _, stored := rec.Secrets["web-tls"]["unused"]; stored {
		t.Error("a secret key the pod does not mount was stored")
	}
	if ev := h.events.with(EventSaved); len(ev) != 1 {
		t.Errorf("saved events %v, want one", ev)
	}
	h.pass()
	if ev := h.events.with(EventSaved); len(ev) != 1 {
		t.Errorf("an unchanged checkpoint posted another event: %v", ev)
	}

	// A spec change of the running pod updates the checkpoint.
	h.api.put(pod("web", "uid-1", "nginx:2", true))
	h.advance(5 * time.Second)
	h.pass()
	if img := h.saved(web).Pod.Spec.Containers[0].Image; img != "nginx:2" {
		t.Errorf("checkpoint image %s after a spec change, want nginx:2", img)
	}

	// The API server goes away without a reboot; the pod stops (the kubelet
	// evicted it, or it is being restarted): the kubelet knows it, so nothing
	// is restored however long the outage lasts.
	h.api.setReachable(false, h.now)
	h.advance(2 * grace)
	h.pass()
	h.rt.set(sandbox("sb1", p, false))
	h.advance(10 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("restored during an outage without a reboot: the kubelet still knows the pod")
	}

	// Reboot with the API away: nothing within the grace period, then restored.
	h.reboot()
	h.advance(grace / 2)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("restored before the grace period")
	}
	h.advance(grace)
	h.pass()
	sp := h.staticManifest(web)
	if sp == nil {
		t.Fatal("not restored after a reboot and the grace period")
	}
	if sp.Annotations[contract.AnnotationCheckpointOf] != "default/web" || sp.Annotations[contract.AnnotationReservedDuration] != "5" ||
		sp.Spec.Containers[0].Image != "nginx:2" || sp.Spec.NodeName != "" {
		t.Errorf("static copy: annotations %v image %s nodeName %q", sp.Annotations, sp.Spec.Containers[0].Image, sp.Spec.NodeName)
	}
	keyFile := filepath.Join(h.volumes, "default_web", "tls", "key")
	if data, err := os.ReadFile(keyFile); err != nil || string(data) != "SECRET" {
		t.Fatalf("restored secret file: %q, %v", data, err)
	}
	if st, _ := os.Stat(copyPath(h.static, web)); st.Mode().Perm() != 0o600 {
		t.Errorf("manifest mode %v, want 0600", st.Mode().Perm())
	}

	// The kubelet runs the copy: the restore is confirmed.
	h.rt.set(copySandbox("sb-copy", "default/web", true))
	h.advance(4 * time.Second)
	h.pass()
	if n := sampleCount(h.m.RestoreSeconds); n != 1 {
		t.Errorf("restore_seconds has %d observations, want 1", n)
	}
	h.advance(time.Hour)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("copy removed while the API server is away")
	}

	// API back, parent bound here: not before the stability period.
	h.api.setReachable(true, h.now)
	h.pass()
	h.advance(stable - time.Second)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("copy removed before the API server was reachable for the stability period")
	}
	h.advance(time.Second)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("copy kept after the stability period")
	}
	if got := testutil.ToFloat64(h.m.HandBacksTotal); got != 1 {
		t.Errorf("handbacks_total %v, want 1", got)
	}
	if ev := h.events.with(EventHandedBack); len(ev) != 1 || !strings.Contains(ev[0], "restored by checkpointd") {
		t.Errorf("hand-back events %v", ev)
	}
	// Its files stay while its sandbox still stops, and go after.
	h.pass()
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatalf("files removed while the copy's sandbox still runs: %v", err)
	}
	h.rt.set(copySandbox("sb-copy", "default/web", false))
	h.pass()
	if _, err := os.Stat(filepath.Dir(filepath.Dir(keyFile))); !os.IsNotExist(err) {
		t.Errorf("files of the removed copy left behind: %v", err)
	}
	if h.saved(web) == nil {
		t.Error("checkpoint lost at hand-back")
	}
}

// TestFlappingAPIDoesNotFlapCopies: a self-hosted control
// plane that answers for seconds at a time neither removes the copy nor
// restores it again.
func TestFlappingAPIDoesNotFlapCopies(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("not restored")
	}
	h.rt.set(copySandbox("sb-copy", "default/web", true))
	for i := 0; i < 30; i++ {
		h.api.setReachable(i%2 == 0, h.now)
		h.advance(stable / 3)
		h.pass()
		if h.staticManifest(web) == nil {
			t.Fatalf("flap %d: copy removed by an API server that never stayed up for %v", i, stable)
		}
	}
	if got := testutil.ToFloat64(h.m.RestoresTotal); got != 1 {
		t.Errorf("restores_total %v, want 1", got)
	}
}

// TestParentGoneKeepsReservation: a parent gone from the API
// loses its checkpoint after the grace period; its IP reservation is left
// to the pod's own duration (checkpointd touches no reservation).
func TestParentGoneKeepsReservation(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	reserved := entry("cbr0", "10.244.1.5", reservation.Reserved, "", "default/web", h.now)
	h.ipam.entries = []reservation.Entry{reserved}
	h.api.del("default", "web")
	h.rt.set()
	h.pass()
	h.advance(grace - time.Second)
	h.pass()
	if h.saved(web) == nil {
		t.Fatal("checkpoint removed before the grace period")
	}
	h.advance(time.Second)
	h.pass()
	if h.saved(web) != nil {
		t.Error("checkpoint kept after the grace period")
	}
	if len(h.ipam.entries) != 1 || h.ipam.entries[0].State != reservation.Reserved || len(h.ipam.deleted) != 0 {
		t.Errorf("IPAM changed: %+v, deleted %v; the reservation must keep its own duration", h.ipam.entries, h.ipam.deleted)
	}
	if _, ok := h.store.AbsentSince(web); ok {
		t.Error("absence mark left after the release")
	}
	if got := testutil.ToFloat64(h.m.ReleasesTotal); got != 1 {
		t.Errorf("releases_total %v, want 1", got)
	}
}

// TestPolicy: the operator, not the pod's author, decides.
func TestPolicy(t *testing.T) {
	h := newHarness(t)
	elsewhere := pod("app", "uid-ns", "nginx", true)
	elsewhere.Namespace = "team-a"
	priv := pod("agent", "uid-priv", "nginx", true)
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: func() *bool { b := true; return &b }()}
	job := pod("job", "uid-job", "nginx", true)
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	for _, p := range []*corev1.Pod{elsewhere, priv, job} {
		h.api.put(p)
	}
	h.rt.set(sandbox("a", elsewhere, true), sandbox("b", priv, true), sandbox("c", job, true))
	for i := 0; i < 3; i++ {
		h.pass()
		h.advance(time.Minute)
	}
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Errorf("saved %d checkpoints of refused pods", len(recs))
	}
	if n := h.api.gets["Secret"]; n != 0 {
		t.Errorf("%d secret reads for refused pods; a refused pod's secrets are never read", n)
	}
	ev := h.events.with(EventRefused)
	if len(ev) != 3 {
		t.Fatalf("refusal events %v, want one per pod", ev)
	}
	for _, want := range []string{`team-a/app CheckpointRefused: checkpointd on node node1 will not checkpoint this pod: namespace "team-a"`,
		"default/agent CheckpointRefused", `privileged: container "c" is privileged`, "default/job CheckpointRefused", "restartPolicy is Never"} {
		if !strings.Contains(strings.Join(ev, "\n"), want) {
			t.Errorf("refusal events %v do not say %q", ev, want)
		}
	}
	for reason, n := range map[string]float64{policy.ReasonNamespace: 1, policy.ReasonPrivileged: 1, policy.ReasonRestartPolicy: 1} {
		if got := testutil.ToFloat64(h.m.Refusals.WithLabelValues(reason)); got != n {
			t.Errorf("refusals_total{reason=%s} %v, want %v", reason, got, n)
		}
	}

	// The operator allows privileged pods in default: saved.
	h.cfg.Policy, _ = policy.Parse("default,kube-system", "default")
	h.start()
	h.pass()
	agent := checkpoint.ID{Namespace: "default", Name: "agent"}
	if h.saved(agent) == nil {
		t.Fatal("privileged pod not saved once its namespace is allowed privileged pods")
	}
	// Restored after a reboot...
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(agent) == nil {
		t.Fatal("allowed privileged pod not restored")
	}
	// ...then, still during the outage, the operator narrows the policy and
	// restarts checkpointd: the copy's manifest goes at once (the kubelet
	// stops it when it reaches the API server), the checkpoint stays: a
	// refusal blocks restores but deletes nothing.
	h.cfg.Policy, _ = policy.Parse("default,kube-system", "")
	h.start()
	h.pass()
	if h.staticManifest(agent) != nil {
		t.Error("copy of a pod the policy now refuses kept")
	}
	if h.saved(agent) == nil {
		t.Fatal("checkpoint deleted by a narrower policy during the outage")
	}
	// A typo at the next boot, still during the outage: nothing restored, nothing deleted.
	h.cfg.Policy, _ = policy.Parse("kube-sytem", "")
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(agent) != nil || h.saved(agent) == nil {
		t.Fatal("a policy typo at boot restored the pod or deleted its checkpoint")
	}
	// The typo fixed: the checkpoint is there to be restored.
	h.cfg.Policy, _ = policy.Parse("default,kube-system", "default")
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(agent) == nil {
		t.Fatal("not restored once the policy allows it again")
	}
}

// TestOutageWithoutRebootRestoresNothing, pod by pod: a
// completed pod, a pod the kubelet evicted, a pod whose sandbox died.
func TestOutageWithoutRebootRestoresNothing(t *testing.T) {
	h := newHarness(t)
	var sbs []cri.Sandbox
	for _, name := range []string{"done", "evicted", "crashed"} {
		p := pod(name, "uid-"+name, "nginx", true)
		h.api.put(p)
		sbs = append(sbs, sandbox("sb-"+name, p, true))
	}
	h.rt.set(sbs...)
	h.pass()
	if recs, _, _ := h.store.List(); len(recs) != 3 {
		t.Fatalf("%d checkpoints, want 3", len(recs))
	}
	h.api.setReachable(false, h.now)
	for i := range sbs {
		sbs[i].Ready = false
	}
	h.rt.set(sbs[:2]...) // the third sandbox is gone altogether
	h.advance(10 * grace)
	h.pass()
	if copies, _ := filepath.Glob(filepath.Join(h.static, "*")); len(copies) != 0 {
		t.Fatalf("restored during an outage without a reboot: %v", copies)
	}
}

// TestPerPodErrorsStayPerPod: a pod whose secret is gone
// fails alone; the others are saved and the daemon stays healthy.
func TestPerPodErrorsStayPerPod(t *testing.T) {
	h := newHarness(t)
	broken := pod("broken", "uid-b", "nginx", true)
	broken.Spec.Volumes[0].Secret.SecretName = "deleted-secret"
	ok := pod("web", "uid-1", "nginx", true)
	h.api.put(broken)
	h.api.put(ok)
	h.rt.set(sandbox("b", broken, true), sandbox("w", ok, true))
	for i := 0; i < 3; i++ {
		h.pass()
	}
	if h.saved(web) == nil {
		t.Error("a healthy pod was not saved because another failed")
	}
	if last, err := h.r.Health(); err != nil || last.IsZero() {
		t.Errorf("Health = %v, %v: one pod's error made the daemon unhealthy", last, err)
	}
	if got := testutil.ToFloat64(h.m.PodErrors.WithLabelValues("save")); got != 1 {
		t.Errorf("pod_errors_total{step=save} %v after three passes, want 1 (once per distinct error)", got)
	}
}

// TestUnsupportedPodReadsNothing: the secrets of a pod that
// cannot be checkpointed (a PVC) are never read, pass after pass.
func TestUnsupportedPodReadsNothing(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx", true)
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	for i := 0; i < 5; i++ {
		h.pass()
		h.advance(11 * time.Minute)
	}
	if h.saved(web) != nil || h.api.gets["Secret"] != 0 {
		t.Errorf("PVC pod: saved=%v, %d secret reads; want neither", h.saved(web) != nil, h.api.gets["Secret"])
	}
	if got := testutil.ToFloat64(h.m.Refusals.WithLabelValues(policy.ReasonUnsupported)); got != 1 {
		t.Errorf("refusals_total{reason=%s} %v, want 1", policy.ReasonUnsupported, got)
	}
}

// TestFilesReadableByThePodsUser: under the unit's
// UMask=0077 the restored files are readable as the pod spec says (here a
// non-root user with an fsGroup), not root-only; on the host only root
// reaches them.
func TestFilesReadableByThePodsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testharness.Missing(t, "needs root to give files the pod's fsGroup")
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx", true)
	uid, gid := int64(1000), int64(2000)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, FSGroup: &gid}
	p.Spec.Volumes[0].Secret.Items[0].Path = "nested/dir/key"
	h.running(p)
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(web) == nil {
		t.Fatal("not restored")
	}
	root := filepath.Join(h.volumes, "default_web")
	for path, want := range map[string]struct {
		mode os.FileMode
		gid  int64
	}{
		h.volumes:                         {0o700, 0},
		root:                              {0o700, 0},
		filepath.Join(root, "tls"):        {0o755, gid},
		filepath.Join(root, "tls/nested"): {0o755, gid},
		filepath.Join(root, "tls/nested/dir/key"): {0o440, gid}, // defaultMode 0400 + group read
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != want.mode || int64(sys.Gid) != want.gid {
			t.Errorf("%s: mode %v gid %d, want %v gid %d", path, st.Mode().Perm(), sys.Gid, want.mode, want.gid)
		}
	}
}

// TestInvalidCopyRefusedAtSave: a pod whose static copy the
// kubelet would reject is reported when it is saved (log, metric, Event),
// and no copy of it is ever written.
func TestInvalidCopyRefusedAtSave(t *testing.T) {
	h := newHarness(t)
	h.cfg.Node = strings.Repeat("n", 60) // a long node name makes <name>-<node> too long
	h.start()
	long := pod(strings.Repeat("a", 200), "uid-long", "nginx", true)
	long.Spec.NodeName = h.cfg.Node
	h.running(long)
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Fatal("saved a pod whose copy the kubelet would reject")
	}
	if ev := h.events.with(EventFailed); len(ev) != 1 || !strings.Contains(ev[0], "metadata.name") {
		t.Errorf("failure events %v, want one naming metadata.name", ev)
	}
	// Longer still: too long for checkpointd's own file names; refused
	// before anything is read.
	longer := pod(strings.Repeat("b", 240), "uid-longer", "nginx", true)
	longer.Spec.NodeName = h.cfg.Node
	gets := h.api.gets["Secret"]
	h.running(longer)
	if ev := h.events.with(EventFailed); len(ev) != 2 || !strings.Contains(ev[1], "too long") || h.api.gets["Secret"] != gets {
		t.Errorf("failure events %v (secret reads %d → %d), want one saying too long and no read", ev, gets, h.api.gets["Secret"])
	}
	h.cfg.Node = "node1"
	h.start()
	// A pod name that is not a host name is fine: the copy gets no spec.hostname.
	dotted := pod("web.v2", "uid-dot", "nginx", true)
	h.running(dotted)
	h.reboot()
	h.advance(grace)
	h.pass()
	sp := h.staticManifest(checkpoint.ID{Namespace: "default", Name: "web.v2"})
	if sp == nil || sp.Spec.Hostname != "" {
		t.Fatalf("copy of web.v2: %v", sp)
	}
}

// TestUnconfirmedRestoreIsReported: a copy that gets no running sandbox
// within --restore-timeout is reported once (the kubelet rejected it or it
// cannot start); one that runs is not.
func TestUnconfirmedRestoreIsReported(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	for i := 0; i < 5; i++ {
		h.advance(time.Minute)
		h.pass()
	}
	if got := testutil.ToFloat64(h.m.RestoreFailures.WithLabelValues("no-sandbox")); got != 1 {
		t.Errorf("restore_failures_total{reason=no-sandbox} %v, want 1", got)
	}
}

// TestOrphanedCopyRemovedAtStart: a copy whose checkpoint is
// gone is removed by the first pass, whatever the API server does.
func TestOrphanedCopyRemovedAtStart(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	if err := h.store.Remove(web); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.pass()
	if h.staticManifest(web) != nil {
		t.Error("a copy without a checkpoint outlived the restart")
	}
}

// TestRemoveCopies: `cleanup --all`: every copy and its files go; static
// pods that are not ours stay.
func TestRemoveCopies(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	other := filepath.Join(h.static, "kube-apiserver.yaml")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveCopies(h.static, h.volumes)
	if err != nil || len(removed) != 2 {
		t.Fatalf("removed %v, %v; want the manifest and its files", removed, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a static pod checkpointd did not write was touched: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(h.static, checkpoint.StaticPrefix+"*")); len(left) != 0 {
		t.Errorf("copies left: %v", left)
	}
}

// TestTransientAPIErrorDeletesNothing: whatever the API said last, nothing
// it would take the API's word for is removed while it cannot be reached.
func TestTransientAPIErrorDeletesNothing(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.api.del("default", "web")
	h.pass() // the API said: absent
	h.api.setReachable(false, h.now)
	h.advance(10 * grace)
	h.pass()
	if h.saved(web) == nil {
		t.Error("checkpoint deleted while the API server was unreachable")
	}
	if h.staticManifest(web) != nil {
		t.Error("a pod the API last reported gone was restored")
	}
}

func TestNotOptedInNeverSaved(t *testing.T) {
	h := newHarness(t)
	h.running(pod("plain", "uid-2", "nginx:1", false))
	h.reboot()
	h.advance(2 * grace)
	h.pass()
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Errorf("%d checkpoints for a pod without the opt-in", len(recs))
	}
	if entries, _ := os.ReadDir(h.static); len(entries) != 0 {
		t.Errorf("static manifests for a pod without the opt-in: %v", entries)
	}
}

func TestOtherNodesAndTerminatingPodsIgnored(t *testing.T) {
	h := newHarness(t)
	elsewhere := pod("elsewhere", "u3", "nginx", true)
	elsewhere.Spec.NodeName = "node2"
	done := pod("done", "u4", "nginx", true)
	done.Status.Phase = corev1.PodSucceeded
	dying := pod("dying", "u5", "nginx", true)
	now := metav1.NewTime(h.now)
	dying.DeletionTimestamp = &now
	for _, p := range []*corev1.Pod{elsewhere, done, dying} {
		h.api.put(p)
	}
	h.rt.set(sandbox("a", elsewhere, true), sandbox("b", done, true), sandbox("c", dying, true))
	h.pass()
	if recs, _, _ := h.store.List(); len(recs) != 0 {
		t.Errorf("saved %d checkpoints, want none", len(recs))
	}
}

func TestOldIncarnationNotSaved(t *testing.T) {
	h := newHarness(t)
	h.api.put(pod("web", "uid-new", "nginx:2", true))
	h.rt.set(sandbox("old", pod("web", "uid-old", "nginx:1", true), true))
	h.pass()
	if h.saved(web) != nil {
		t.Error("saved although only an older pod of that name runs")
	}
}

func TestRuntimeErrorChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.reboot()
	h.advance(2 * grace)
	passes := testutil.ToFloat64(h.m.PassesTotal)
	h.rt.err = errors.New("connection refused")
	if err := h.r.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("reconcile with the runtime down: %v, want its error", err)
	}
	if got := testutil.ToFloat64(h.m.PassesTotal); got != passes {
		t.Errorf("reconcile_passes_total %v after a pass that could not observe, want %v (a test waiting for passes would take it for a chance to act)", got, passes)
	}
	if h.staticManifest(web) != nil {
		t.Error("restored without knowing what runs locally")
	}
	if got := testutil.ToFloat64(h.m.ReconcileErrors); got != 1 {
		t.Errorf("reconcile_errors_total %v, want 1", got)
	}
	if _, err := h.r.Health(); err == nil {
		t.Error("Health reports no error although the node cannot be observed")
	}
	h.rt.err = nil
	if err := h.r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(h.m.PassesTotal); got != passes+1 {
		t.Errorf("reconcile_passes_total %v after a pass that observed the node, want %v", got, passes+1)
	}
}

func TestCorruptCheckpointNotRestored(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	path := h.store.Path(web)
	data, _ := os.ReadFile(path)
	data[len(data)-3] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	h.reboot()
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Error("corrupt checkpoint restored")
	}
	if got := testutil.ToFloat64(h.m.CorruptTotal); got != 1 {
		t.Errorf("checkpoints_corrupt_total %v, want 1", got)
	}
	if entries, _ := os.ReadDir(filepath.Join(h.store.Dir(), checkpoint.CorruptDir)); len(entries) != 1 {
		t.Errorf("corrupt file not set aside: %v", entries)
	}
	// Kept as evidence for the retention, then pruned.
	h.advance(8 * 24 * time.Hour)
	h.pass()
	if entries, _ := os.ReadDir(filepath.Join(h.store.Dir(), checkpoint.CorruptDir)); len(entries) != 0 {
		t.Errorf("corrupt file kept past the retention: %v", entries)
	}
}

func TestSecretsReadOnlyWhenChangedOrDue(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.pass()
	h.pass()
	if n := h.api.gets["Secret"]; n != 1 {
		t.Errorf("%d secret reads for an unchanged pod, want 1", n)
	}
	h.api.objects["Secret/default/web-tls"] = map[string][]byte{"key": []byte("ROTATED")}
	h.advance(11 * time.Minute)
	h.pass()
	if got := string(h.saved(web).Secrets["web-tls"]["key"]); got != "ROTATED" {
		t.Errorf("secret %q after the refresh period, want the rotated value", got)
	}
}

func TestLeakedAllocationsHandledAsDel(t *testing.T) {
	h := newHarness(t)
	old := h.now.Add(-time.Hour)
	h.rt.set(cri.Sandbox{ID: "live", Namespace: "default", Name: "a", Ready: true},
		cri.Sandbox{ID: "stopped", Namespace: "default", Name: "b", Ready: false})
	h.ipam.entries = []reservation.Entry{
		entry("cbr0", "10.244.1.2", reservation.Allocated, "live", "default/a", old),
		entry("cbr0", "10.244.1.3", reservation.Allocated, "stopped", "default/b", old),
		entry("cbr0", "10.244.1.4", reservation.Allocated, "gone", "default/c", old),
		entry("cbr0", "10.244.1.5", reservation.Allocated, "young", "default/d", h.now.Add(-time.Second)),
		timed(entry("cbr0", "10.244.1.6", reservation.Reserved, "", "default/r", old), h.now.Add(time.Hour)),
		// Reservations and cooling addresses, expired or not, are no sandbox's.
		timed(entry("cbr0", "10.244.1.7", reservation.Reserved, "", "default/x", old), h.now.Add(-time.Second)),
		timed(entry("cbr0", "10.244.1.8", reservation.Cooling, "", "", old), h.now.Add(time.Minute)),
		timed(entry("cbr0", "10.244.1.9", reservation.Cooling, "", "", old), h.now.Add(-time.Minute)),
	}
	h.pass()
	if len(h.ipam.deleted) != 0 {
		t.Fatalf("released after one pass: %v (a sandbox must be missing twice)", h.ipam.deleted)
	}
	h.advance(5 * time.Second)
	h.pass()
	if strings.Join(h.ipam.deleted, ",") != "cbr0/gone/eth0" {
		t.Errorf("DEL for %v, want only cbr0/gone/eth0", h.ipam.deleted)
	}
	// The young one becomes a leak once old enough (and missing twice).
	h.advance(3 * time.Minute)
	h.pass()
	h.pass()
	if strings.Join(h.ipam.deleted, ",") != "cbr0/gone/eth0,cbr0/young/eth0" {
		t.Errorf("DEL for %v, want the young allocation released once old", h.ipam.deleted)
	}
}

// The pool gauges are the IPAM's own totals (ipamstore counts them with the
// engine, as `stickyip status` does); when they cannot be read the last
// values stay and the pass reports the problem.
func TestPoolGauges(t *testing.T) {
	h := newHarness(t)
	pools := &poolIPAM{fakeIPAM: h.ipam, pools: map[string]ipam.PoolTotals{
		"cbr0": {Size: 253, Allocated: 4, Reserved: 2, Cooling: 1, Free: 246},
	}}
	h.cfg.IPAM = pools
	h.start()
	gauges := func() string {
		return fmt.Sprint(testutil.ToFloat64(h.m.Allocations.WithLabelValues("cbr0")), testutil.ToFloat64(h.m.Reservations.WithLabelValues("cbr0")),
			testutil.ToFloat64(h.m.Cooling.WithLabelValues("cbr0")), testutil.ToFloat64(h.m.FreeIPs.WithLabelValues("cbr0")))
	}
	h.pass()
	if got := gauges(); got != "4 2 1 246" {
		t.Fatalf("allocations reservations cooling free = %s, want 4 2 1 246", got)
	}
	pools.err = errors.New("reading /etc/cni/net.d: permission denied")
	h.pass()
	if got := gauges(); got != "4 2 1 246" {
		t.Errorf("after a failed count the gauges are %s, want the last values", got)
	}
	if got := testutil.ToFloat64(h.m.PodErrors.WithLabelValues("ipam-pools")); got != 1 {
		t.Errorf("pod_errors_total{step=ipam-pools} = %v, want 1", got)
	}
}

// poolIPAM is a fakeIPAM that knows its pools.
type poolIPAM struct {
	*fakeIPAM
	pools map[string]ipam.PoolTotals
	err   error
}

func (p *poolIPAM) Observe() (*ipamstore.View, error) {
	v, err := p.fakeIPAM.Observe()
	v.Pools, v.ConfErr = p.pools, p.err
	return v, err
}

func TestLeakCountResetsWhenSandboxReappears(t *testing.T) {
	h := newHarness(t)
	h.ipam.entries = []reservation.Entry{entry("n", "10.0.0.2", reservation.Allocated, "flaky", "default/a", h.now.Add(-time.Hour))}
	h.pass() // missing once
	h.rt.set(cri.Sandbox{ID: "flaky", Ready: true})
	h.pass() // present again
	h.rt.set()
	h.pass() // missing once more: still only one in a row
	if len(h.ipam.deleted) != 0 {
		t.Errorf("released %v although never missing twice in a row", h.ipam.deleted)
	}
}

// TestLeakWithLiveNetnsKept: a sandbox the CRI does not list whose network
// namespace still exists (another runtime, cnitool) keeps its allocation,
// pass after pass, and is neither counted nor logged as a leak; once the
// namespace is gone it is released.
func TestLeakWithLiveNetnsKept(t *testing.T) {
	h := newHarness(t)
	h.ipam.entries = []reservation.Entry{entry("n", "10.0.0.2", reservation.Allocated, "cnitool", "default/a", h.now.Add(-time.Hour))}
	h.ipam.alive = map[string]bool{"cnitool": true}
	for range 3 {
		h.pass()
	}
	if len(h.ipam.deleted) != 0 || len(h.ipam.entries) != 1 || testutil.ToFloat64(h.m.ReconciledLeaks) != 0 {
		t.Fatalf("released %v (leaks counted %v) while its network namespace exists", h.ipam.deleted, testutil.ToFloat64(h.m.ReconciledLeaks))
	}
	delete(h.ipam.alive, "cnitool")
	h.pass()
	if strings.Join(h.ipam.deleted, ",") != "n/cnitool/eth0" || testutil.ToFloat64(h.m.ReconciledLeaks) != 1 {
		t.Fatalf("after its namespace went: released %v, want n/cnitool/eth0 counted once", h.ipam.deleted)
	}
}

// TestFilesRewrittenAfterReboot: the static manifest survives a power cut
// but the tmpfs files do not; checkpointd rewrites them.
func TestFilesRewrittenAfterReboot(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	keyFile := filepath.Join(h.volumes, "default_web", "tls", "key")
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatal(err)
	}
	h.reboot()
	h.pass()
	if data, err := os.ReadFile(keyFile); err != nil || string(data) != "SECRET" {
		t.Errorf("secret file after the second reboot: %q, %v", data, err)
	}
	if h.staticManifest(web) == nil {
		t.Error("static copy lost")
	}
}

// TestDeletedThenRebootedNotRestored: the API said the parent was deleted;
// the node then reboots with the API server away. The new checkpointd
// process must not restore it, and releases it once the API answers.
func TestDeletedThenRebootedNotRestored(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.api.del("default", "web")
	h.rt.set()
	h.pass() // absence observed and recorded
	h.reboot()
	h.advance(2 * grace)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Fatal("a pod the API had reported deleted was restored after a reboot")
	}
	if h.saved(web) == nil {
		t.Fatal("checkpoint deleted while the API server is away")
	}
	h.api.setReachable(true, h.now.Add(-stable))
	h.pass()
	if h.saved(web) != nil {
		t.Error("checkpoint kept after the API confirmed the deletion")
	}
}

// TestParentBackClearsAbsence: a parent reported gone and then back (e.g.
// re-created on this node) is restorable again, from its own checkpoint.
func TestParentBackClearsAbsence(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx:1", true))
	h.api.del("default", "web")
	h.pass()
	if _, ok := h.store.AbsentSince(web); !ok {
		t.Fatal("absence not recorded")
	}
	h.advance(5 * time.Second)
	h.running(pod("web", "uid-2", "nginx:1", true))
	if _, ok := h.store.AbsentSince(web); ok {
		t.Error("absence mark kept although the parent is back")
	}
	h.reboot()
	h.advance(grace)
	h.pass()
	if sp := h.staticManifest(web); sp == nil || sp.Annotations[contract.AnnotationCheckpointUID] != "uid-2" {
		t.Errorf("re-created pod not restored from its own checkpoint: %+v", sp)
	}
}

func TestStaticPrefixOnlyOurs(t *testing.T) {
	h := newHarness(t)
	if err := os.MkdirAll(h.static, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(h.static, "kube-apiserver.yaml")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.pass()
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a static pod checkpointd did not write was touched: %v", err)
	}
}

// TestNoAbsenceMarkWithoutCheckpoint: identities known only by a leftover
// copy or files leave no mark behind on disk.
func TestNoAbsenceMarkWithoutCheckpoint(t *testing.T) {
	h := newHarness(t)
	if err := os.MkdirAll(filepath.Join(h.volumes, "default_orphan", "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.pass()
	h.pass()
	if marks, _ := filepath.Glob(filepath.Join(h.store.Dir(), "*"+checkpoint.AbsentSuffix)); len(marks) != 0 {
		t.Errorf("absence marks %v for an identity without a checkpoint", marks)
	}
	if _, err := os.Stat(filepath.Join(h.volumes, "default_orphan")); !os.IsNotExist(err) {
		t.Errorf("leftover files of a copy that is gone were kept: %v", err)
	}
}
