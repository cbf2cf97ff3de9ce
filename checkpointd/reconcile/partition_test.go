package reconcile

import (
	"bytes"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// owned makes p controlled by a kind of apiVersion, with the tolerations
// the DefaultTolerationSeconds admission plugin adds (tolerationSeconds s).
func owned(p *corev1.Pod, apiVersion, kind string, s int64) *corev1.Pod {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "owner-uid", Controller: &yes}}
	for _, key := range []string{state.TaintNotReady, state.TaintUnreachable} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &s})
	}
	return p
}

// partitioned saves rs (ReplicaSet, 300 s), sts (StatefulSet) and bare, then
// cuts the node off for d and reboots it.
func partitioned(t *testing.T, d time.Duration) (*harness, map[string]checkpoint.ID) {
	h := newHarness(t)
	pods := []*corev1.Pod{
		owned(pod("rs", "uid-rs", "nginx", true), "apps/v1", "ReplicaSet", 300),
		owned(pod("sts", "uid-sts", "nginx", true), "apps/v1", "StatefulSet", 300),
		pod("bare", "uid-bare", "nginx", true),
	}
	ids := map[string]checkpoint.ID{}
	var sbs []cri.Sandbox
	for _, p := range pods {
		h.api.put(p)
		sbs = append(sbs, sandbox("sb-"+p.Name, p, true))
		ids[p.Name] = checkpoint.ID{Namespace: p.Namespace, Name: p.Name}
	}
	h.rt.set(sbs...)
	h.pass()
	h.api.setReachable(false, h.now)
	h.advance(d)
	h.pass()
	h.reboot()
	h.advance(grace)
	h.pass()
	return h, ids
}

// TestLongPartitionRestoresOnlyWhatNothingReplaced: a
// ReplicaSet pod is restored after a partition shorter than its toleration,
// not after a longer one (its replacement may run elsewhere); StatefulSet
// and bare pods are restored after any partition.
func TestLongPartitionRestoresOnlyWhatNothingReplaced(t *testing.T) {
	for _, tc := range []struct {
		partition time.Duration
		rs        bool
	}{
		{2 * time.Minute, true}, // + 10 s reboot + 1 m grace < 300 s
		{4 * time.Minute, false},
		{2 * time.Hour, false},
	} {
		h, ids := partitioned(t, tc.partition)
		for name, want := range map[string]bool{"rs": tc.rs, "sts": true, "bare": true} {
			if got := h.staticManifest(ids[name]) != nil; got != want {
				t.Errorf("partition of %s then a reboot: %s restored %t, want %t", tc.partition, name, got, want)
			}
			if h.saved(ids[name]) == nil {
				t.Errorf("partition of %s: checkpoint of %s deleted", tc.partition, name)
			}
		}
	}
}

// TestUnknownLastContactIsForever: without the contact file (lost, or the
// clock set back) only pods nothing replaces are restored.
func TestUnknownLastContactIsForever(t *testing.T) {
	h := newHarness(t)
	p := owned(pod("rs", "uid-rs", "nginx", true), "apps/v1", "ReplicaSet", 300)
	h.running(p)
	if err := os.Remove(filepath.Join(h.store.Dir(), boot.ContactFileName)); err != nil {
		t.Fatalf("the API contact was not recorded: %v", err)
	}
	h.reboot()
	h.advance(grace)
	h.pass()
	if h.staticManifest(checkpoint.ID{Namespace: "default", Name: "rs"}) != nil {
		t.Error("a ReplicaSet pod restored with the last API contact unknown")
	}
}

// TestRestartDuringOutageKeepsTheCopy: checkpointd
// stops during the outage (its own exit and the unit's `cleanup` remove the
// manifest) and starts again: the running copy keeps its files, untouched,
// and gets the very same manifest back; the hand-back still follows.
func TestRestartDuringOutageKeepsTheCopy(t *testing.T) {
	h := newHarness(t)
	h.running(pod("web", "uid-1", "nginx", true))
	h.reboot()
	h.advance(grace)
	h.pass()
	h.rt.set(copySandbox("sb-copy", "default/web", true))
	h.pass()
	manifest, err := os.ReadFile(copyPath(h.static, web))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(h.volumes, "default_web", "tls", "key")
	before := inode(t, keyFile)

	for _, stop := range []string{"restart", "kill -9", "upgrade"} {
		if stop != "kill -9" {
			if _, err := StopCopies(h.static, h.volumes); err != nil { // the daemon's exit
				t.Fatal(err)
			}
		}
		if _, err := StopCopies(h.static, h.volumes); err != nil { // ExecStopPost=checkpointd cleanup
			t.Fatal(err)
		}
		if stop == "upgrade" {
			// The stopped version wrote its manifest otherwise (another
			// format): the new one must put back those bytes, not its own,
			// or the kubelet would see another pod.
			set := filepath.Join(h.volumes, "default_web", stashPrefix+filepath.Base(copyPath(h.static, web)))
			manifest = append([]byte("# written by an older checkpointd\n"), manifest...)
			if err := os.WriteFile(set, manifest, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		h.advance(5 * time.Second) // RestartSec
		h.start()
		h.pass()
		if _, err := os.Stat(keyFile); err != nil {
			t.Fatalf("%s: the running copy's files removed: %v", stop, err)
		}
		h.advance(grace)
		h.pass()
		again, err := os.ReadFile(copyPath(h.static, web))
		if err != nil || !bytes.Equal(again, manifest) {
			t.Fatalf("%s: manifest after the restart differs or is missing (%v):\n%s\nwant\n%s", stop, err, again, manifest)
		}
		if got := inode(t, keyFile); got != before {
			t.Errorf("%s: the running copy's files were replaced (inode %d, was %d): the copy would not see them", stop, got, before)
		}
	}
	if got := testutil.ToFloat64(h.m.RestoresTotal); got != 1 {
		t.Errorf("restores_total %v, want 1: the copy was re-adopted, not restored again", got)
	}

	h.api.setReachable(true, h.now)
	h.pass()
	h.advance(stable)
	h.pass()
	if h.staticManifest(web) != nil {
		t.Error("the re-adopted copy not handed back")
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}
