//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness"
)

// A damaged store rebuilt from what the node knows, on the real runtimes:
// the pods keep running, no operator step but the rebuild itself (the one
// the daemon runs on its own, here `checkpointd rebuild-store`, so that the
// runtime's own sources are read without a kubelet or an API server).
// The node: a sticky pod db, a deleted sticky pod gone (its checkpoint
// holds its address), three plain pods and a pod leaving; db deleted after
// the damage (its DEL fails until the store is back). The damage: the first
// 32 KiB overwritten, the file deleted, or the data directory removed whole
// (its creation mark with it: the runtime's CNI result cache says the node
// had a store). While the rebuild runs, calls arrive as a kubelet makes
// them: a new pod's sandbox started and leaving's deleted, each tried
// again until it succeeds. After the rebuild, after 8 more pods and at the
// end, every address a ready sandbox holds is held by it alone and
// allocated to it in the store (harness.CheckAddresses), and no new pod
// gets an address reserved for gone or db.

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
	for _, name := range []string{"db", "gone", "plain-1", "plain-2", "plain-3", "leaving"} {
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
	// its CNI result; the kubelet would retry. Whether the runtime reports
	// the failure is its own choice (CRI-O gives the DEL up), but stickyip
	// must refuse it: on a damaged or lost store every call fails
	// (test/reliability/README.md, "A damaged store is never overwritten"); a DEL
	// answered with success there would be forgotten by the rebuilt store
	// (logging it is not enough).
	mark := logSize(t, n.logFile)
	if err := cri.StopPod(ctx, ids["db"]); err == nil {
		t.Logf("StopPodSandbox of db with the store %s succeeded (the runtime gave up its DEL)", damage)
	} else {
		t.Logf("StopPodSandbox of db with the store %s: %v", damage, err)
	}
	requireDELRefused(t, n.logFile, mark, ids["db"], damage)

	during, refused := callsWhile(ctx, cri, harness.Pod{Name: "during", Namespace: "default", UID: "during-uid"}, ids["leaving"])
	select { // both calls met the damaged store before the rebuild starts
	case <-refused:
	case c := <-during:
		t.Fatalf("calls on the %s store succeeded before any rebuild (ADD tried %d times, DEL %d): %v", damage, c.adds, c.dels, c.err)
	}
	start := time.Now()
	out := rebuildStore(t, n, endpoint, ckptDir)
	t.Logf("checkpointd rebuild-store took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	c := <-during
	if c.err != nil {
		t.Fatal(c.err)
	}
	t.Logf("calls during the rebuild: during's ADD tried %d times (refused %d), leaving's DEL tried %d times (refused %d)", c.adds, c.adds-1, c.dels, c.dels-1)
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

	requireDistinct(t, n, cri, "after the rebuild")

	// db's DEL, retried, now leaves its reservation.
	deletePod(t, cri, ids["db"])
	reserved := slices.Concat(ips["db"], ips["gone"])
	for i := range 8 {
		name := "new-" + string(rune('a'+i))
		_, got := runPod(t, cri, harness.Pod{Name: name, Namespace: "default", UID: name + "-uid"})
		for _, ip := range got {
			if slices.Contains(reserved, ip) {
				t.Fatalf("%s got %s, which a reservation holds", name, ip)
			}
		}
	}
	requireDistinct(t, n, cri, "with 8 more pods")
	for _, name := range []string{"gone", "db"} {
		p := pods[name]
		p.UID += "-2"
		if _, got := runPod(t, cri, p); !sameSet(got, ips[name]) {
			t.Fatalf("%s re-created got %v, want %v", name, got, ips[name])
		}
	}
	requireDistinct(t, n, cri, "with gone and db back")
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
		"--cri-endpoint", "unix://"+endpoint, "--checkpoint-dir", ckptDir, "--cni-results-dir", contract.DefaultCNIResultsDir,
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

// requireDistinct fails the test unless every address a ready sandbox of
// the runtime holds is held by it alone and allocated to it in the node's
// store (harness.CheckAddresses); when says at what point.
func requireDistinct(t *testing.T, n *node, cri *harness.CRIClient, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, problems, err := harness.CheckAddresses(ctx, cri, func() []entry { return n.list(t) })
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("%s: addresses of ready sandboxes:\n%s", when, strings.Join(problems, "\n"))
	}
	t.Logf("%s: %d addresses of ready sandboxes, each held once and allocated to its sandbox", when, len(held))
}

// rebuildCalls is what callsWhile did: how many times each call was tried.
type rebuildCalls struct {
	adds, dels int
	err        error
}

// callsWhile starts, at once and side by side, pod p's sandbox and the
// deletion of sandbox leaving, each tried again every 200 ms until it
// succeeds (as the kubelet retries). refused is closed once each has been
// refused once; done reports once both succeeded (or a minute has passed).
func callsWhile(ctx context.Context, cri *harness.CRIClient, p harness.Pod, leaving string) (done <-chan rebuildCalls, refused <-chan struct{}) {
	out := make(chan rebuildCalls, 1)
	ref := make(chan struct{})
	var refusals sync.WaitGroup
	refusals.Add(2)
	go func() { refusals.Wait(); close(ref) }()
	retry := func(n *int, what string, call func() error) error {
		deadline := time.Now().Add(time.Minute)
		for {
			*n++
			err := call()
			if err == nil {
				return nil
			}
			if *n == 1 {
				refusals.Done()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s, tried %d times: %w", what, *n, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	go func() {
		var c rebuildCalls
		var addErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			addErr = retry(&c.adds, "RunPodSandbox "+p.Name, func() error {
				_, err := cri.RunPod(ctx, p)
				return err
			})
		})
		delErr := retry(&c.dels, "delete sandbox "+leaving, func() error { return cri.DeletePod(ctx, leaving) })
		wg.Wait()
		c.err = errors.Join(addErr, delErr)
		out <- c
	}()
	return out, ref
}

// logSize is the length of the plugin's log now (0: none yet).
func logSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// requireDELRefused fails the test unless the plugin's log after mark shows
// the DEL of sandbox id refused by the damaged or lost store, and no DEL of
// it answered with success.
func requireDELRefused(t *testing.T, path string, mark int64, id, damage string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, l := range strings.Split(string(b[min(mark, int64(len(b))):]), "\n") {
		if !strings.Contains(l, "container="+id+" ") && !strings.HasSuffix(l, "container="+id) {
			continue
		}
		switch {
		case strings.Contains(l, " msg=DEL "):
			t.Fatalf("stickyip answered db's DEL with success on the %s store: %s", damage, l)
		case strings.Contains(l, `msg="call failed"`) &&
			(strings.Contains(l, reservation.ErrCorrupt.Error()) || strings.Contains(l, reservation.ErrLost.Error())):
			refused = append(refused, l)
		}
	}
	if len(refused) == 0 {
		t.Fatalf("db's DEL on the %s store: no refusal of it in %s (did the runtime call it?)", damage, path)
	}
	t.Logf("db's DEL refused by the %s store (%d times)", damage, len(refused))
}
