//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/cnicache"
	"github.com/stickyip/stickyip/test/harness"
)

// A damaged store rebuilt from what the node knows, on the real runtimes:
// the pods keep running, no operator step but the rebuild itself (the one
// the daemon runs on its own, here `checkpointd rebuild-store`, so that the
// runtime's own sources are read without a kubelet or an API server).
// The node: a sticky pod db, a deleted sticky pod gone (its checkpoint
// holds its address), three plain pods; db deleted after the damage (its
// DEL fails until the store is back). The damage: the first 32 KiB
// overwritten, the file deleted, or the data directory removed whole (its
// creation mark with it: the runtime's CNI result cache says the node had
// a store).

func TestContainerdStoreRebuild(t *testing.T) {
	for _, damage := range []string{"overwritten", "deleted", "directory"} {
		t.Run(damage, func(t *testing.T) {
			n := newNode(t, bridgeConf, "stickyip")
			ctd, cri := n.startContainerd(t)
			requireCNI110(t, ctd)
			storeRebuild(t, n, cri, ctd.Address, damage, true)
		})
	}
}

func TestCRIOStoreRebuild(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	harness.RequireCRIO(t)
	crio := harness.StartCRIO(t, harness.CRIOConfig{Node: n.ns, CNIBinDir: n.binDir, CNIConfDir: n.confDir})
	// CRI-O answers CRI Status from its start-up probe (TestCRIOCNICalls):
	// the damage shows in its ADDs, not in NetworkReady.
	storeRebuild(t, n, crio.CRI(t), crio.Address, "overwritten", false)
}

// storeRebuild runs the scenario on the runtime behind cri (at endpoint);
// status: the runtime reports a failing CNI STATUS as NetworkReady=false.
func storeRebuild(t *testing.T, n *node, cri *harness.CRIClient, endpoint, damage string, status bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sticky := map[string]string{annDuration: "30"}
	pods := map[string]harness.Pod{}
	ids, ips := map[string]string{}, map[string][]string{}
	for _, name := range []string{"db", "gone", "plain-1", "plain-2", "plain-3"} {
		p := harness.Pod{Name: name, Namespace: "default", UID: name + "-uid"}
		if name == "db" || name == "gone" {
			p.Annotations = sticky
		}
		pods[name] = p
		ids[name], ips[name] = runPod(t, cri, p)
	}
	deletePod(t, cri, ids["gone"])
	ckptDir := filepath.Join(n.dir, "checkpoints")
	saveCheckpoint(t, ckptDir, pods["gone"], ips["gone"])

	db := filepath.Join(n.dataDir, "stickyip.db")
	var damaged []byte
	switch damage {
	case "overwritten":
		damaged = overwriteStart(t, db, 32<<10)
	case "deleted":
		if err := os.Remove(db); err != nil {
			t.Fatal(err)
		}
	case "directory": // the data directory removed whole, its creation mark with it
		if err := os.RemoveAll(n.dataDir); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown damage %q", damage)
	}
	if status {
		requireNetworkReady(t, cri, false, "stickyip cannot allocate addresses on this node")
	}
	if _, err := cri.RunPod(ctx, harness.Pod{Name: "too-early", Namespace: "default", UID: "early-uid"}); err == nil ||
		!strings.Contains(err.Error(), "stickyip: store is") {
		t.Fatalf("a pod with the store %s: %v, want stickyip's refusal", damage, err)
	}
	// db deleted now: its DEL fails, so the runtime keeps it (stopped) with
	// its CNI result; the kubelet would retry.
	if err := cri.StopPod(ctx, ids["db"]); err == nil {
		t.Logf("StopPodSandbox of db with the store %s succeeded (the runtime gave up its DEL)", damage)
	} else {
		t.Logf("StopPodSandbox of db with the store %s: %v", damage, err)
	}

	start := time.Now()
	out := rebuildStore(t, n, endpoint, ckptDir)
	t.Logf("checkpointd rebuild-store took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	if status {
		requireNetworkReady(t, cri, true, "")
	}
	n.check(t)
	if damage == "overwritten" {
		kept, _ := filepath.Glob(db + ".damaged-*")
		if len(kept) != 1 {
			t.Fatalf("damaged files kept: %v", kept)
		}
		if b, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(b, damaged) {
			t.Fatalf("%s does not hold the damaged bytes (%v)", kept[0], err)
		}
	}
	rows := n.list(t)
	for _, name := range []string{"db", "plain-1", "plain-2", "plain-3"} {
		if got := ipsIn(entriesFor(rows, "default", name), "allocated"); !sameSet(got, ips[name]) {
			t.Fatalf("after the rebuild %s holds %v, want its running addresses %v (list %+v)", name, got, ips[name], rows)
		}
	}
	if got := ipsIn(entriesFor(rows, "default", "gone"), "reserved"); !sameSet(got, ips["gone"]) {
		t.Fatalf("after the rebuild gone has %v reserved, want %v from its checkpoint", got, ips["gone"])
	}

	// db's DEL, retried, now leaves its reservation.
	deletePod(t, cri, ids["db"])
	held := slices.Concat(ips["db"], ips["gone"], ips["plain-1"], ips["plain-2"], ips["plain-3"])
	for i := range 8 {
		name := "new-" + string(rune('a'+i))
		_, got := runPod(t, cri, harness.Pod{Name: name, Namespace: "default", UID: name + "-uid"})
		for _, ip := range got {
			if slices.Contains(held, ip) {
				t.Fatalf("%s got %s, which a running pod or a reservation holds", name, ip)
			}
		}
	}
	for _, name := range []string{"gone", "db"} {
		p := pods[name]
		p.UID += "-2"
		if _, got := runPod(t, cri, p); !sameSet(got, ips[name]) {
			t.Fatalf("%s re-created got %v, want %v", name, got, ips[name])
		}
	}
	n.check(t)
}

// rebuildStore runs `checkpointd rebuild-store` on the node's store with the
// runtime at endpoint and the machine's CNI result cache.
func rebuildStore(t *testing.T, n *node, endpoint, ckptDir string) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(stickyipBin(t)), "checkpointd")
	if _, err := os.Stat(bin); err != nil {
		harness.Missing(t, "%s missing (run make build)", bin)
	}
	cmd := exec.Command(bin, "rebuild-store", "--data-dir", n.dataDir, "--cni-conf-dir", n.confDir,
		"--cri-endpoint", "unix://"+endpoint, "--checkpoint-dir", ckptDir, "--cni-results-dir", cnicache.DefaultDir,
		"--volume-dir", filepath.Join(n.dir, "volumes"), "--node-name", "node1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("checkpointd rebuild-store: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "IPAM store rebuilt") {
		t.Fatalf("checkpointd rebuild-store did not say it rebuilt:\n%s", out)
	}
	return string(out)
}

// saveCheckpoint writes checkpointd's checkpoint of p, with its addresses.
func saveCheckpoint(t *testing.T, dir string, p harness.Pod, ips []string) {
	t.Helper()
	s, err := checkpoint.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: "x", Annotations: p.Annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: harness.PauseImage}}}}
	if _, err := s.Save(&checkpoint.Record{Pod: pod, IPs: ips}); err != nil {
		t.Fatal(err)
	}
}

// overwriteStart overwrites the first n bytes of path and returns the file.
func overwriteStart(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, n), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
