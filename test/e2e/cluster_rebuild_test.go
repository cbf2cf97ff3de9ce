//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
)

// rebuildNS is the store-rebuild step's namespace.
const rebuildNS = "rebuild"

// rebuildNode is what the store-rebuild step keeps on its node: the
// addresses of db-0 (a StatefulSet pod), of gone (a sticky pod deleted, its
// reservation in the node's placement entries) and of three plain pods;
// the pods the last round created, still running.
type rebuildNode struct {
	n     *node
	ips   map[string]string
	dbUID string
	more  []string
}

// storeRebuild is TestCluster's store-rebuild step: on node2, a
// StatefulSet pod db-0, the reservation of a deleted sticky pod gone and
// three plain pods; then node2's store is damaged, three times, and with
// no operator step checkpointd rebuilds it:
//
//   - overwritten: the first 32 KiB of stickyip.db overwritten;
//   - deleted: stickyip.db deleted;
//   - api-away: the API server stopped, the first 32 KiB overwritten; what
//     the node knows alone is rebuilt (every pod's address allocated, no new
//     address handed out), then, once the API server is back, gone's
//     reservation from the index.
//
// Calls keep arriving meanwhile: in the first two rounds, 9 pods are
// created and the last round's deleted right after the damage (their ADDs
// and DELs meet the damaged store, or the rebuild); with the API server
// away, a static pod's ADD is refused (error 11: the rebuilt store waits
// for the index) and db-0's sandbox, stopped, comes back with its address.
//
// Each time: a new pod runs on node2 within 2 minutes of the damage; every
// address a ready sandbox of node2's runtime holds — those pods', the other
// steps', the new ones' — is held by that sandbox alone and allocated to it
// in the store, checked after the rebuild, once the new pods run and at the
// end (harness.AddressProblems); no new pod gets gone's reserved address;
// gone re-created gets its address; db-0 deleted comes back with its own;
// `stickyip check` exits 0; the damaged bytes are still on disk; an Event
// on the Node says what was rebuilt from where.
func (c *cluster) storeRebuild() {
	t := c.t
	c.applyPlacement() // as the placement step left it (unchanged), or for this step alone
	r := c.rebuildSetup(c.nodes[1])
	for _, how := range []string{"overwritten", "deleted", "api-away"} {
		start := time.Now()
		c.rebuildRound(r, how)
		t.Logf("store-rebuild %s: whole round %s", how, time.Since(start).Round(100*time.Millisecond))
	}
	c.kubectl("delete", "namespace", rebuildNS, "--wait=false")
}

// rebuildSetup makes the step's pods on n.
func (c *cluster) rebuildSetup(n *node) *rebuildNode {
	t := c.t
	ctx := context.Background()
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rebuildNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitDefaultServiceAccount(rebuildNS)
	r := &rebuildNode{n: n, ips: map[string]string{}}
	tmpl := stickyPodTemplate("rdb", map[string]string{annReservation: "10m"})
	tmpl.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.name}
	c.createStatefulSet(rebuildNS, "db", tmpl)
	names := []string{"gone", "plain-1", "plain-2", "plain-3"}
	for _, name := range names {
		ann := map[string]string(nil)
		if name == "gone" {
			ann = map[string]string{annReservation: "10m"}
		}
		c.createPinned(n, name, ann)
	}
	for _, name := range append(names, "db-0") {
		r.ips[name] = n.waitPodRunningIn(rebuildNS, name, 3*time.Minute)
	}
	r.dbUID = c.podUID(rebuildNS, "db-0")
	c.goneReserved(r)
	t.Logf("%s: db-0 %s, gone %s (deleted, reserved in the index), plain pods %s %s %s", n.name,
		r.ips["db-0"], r.ips["gone"], r.ips["plain-1"], r.ips["plain-2"], r.ips["plain-3"])
	return r
}

// rebuildRound damages the node's store one way (how) and checks what
// users must see.
//
// The round's calls meet the damaged store, shown by the plugin's own log
// (a rebuild done before they came would pass otherwise): checkpointd is held (SIGSTOP, as a slow checkpointd
// would be) from the damage until at least one ADD (the round's new pods)
// and one DEL (the pods deleted at the damage) have been refused by the
// damaged store, and no DEL of theirs has succeeded on it
// (test/reliability/README.md: every call fails on a damaged or lost store); then
// let go, it rebuilds with no operator step. With the API server away the
// pods deleted at the damage are static pods of the round, their manifests
// removed (the kubelet deletes them without the API server).
func (c *cluster) rebuildRound(r *rebuildNode, how string) {
	t, n := c.t, r.n
	ctx := context.Background()
	before := n.metricInt("checkpointd_ipam_store_rebuilds_total")
	leaving := map[string]string{} // sandbox ID → pod, deleted at the damage
	var statics []string
	if how == "api-away" {
		c.deletePods(r) // while the API server can still be told
		for i := range 3 {
			name := fmt.Sprintf("leaving-%d", i)
			statics = append(statics, name)
			writeFile(t, filepath.Join(n.staticPodDir(), name+".json"), staticPod(rebuildNS, name), 0o644)
		}
		for _, name := range statics {
			sb := n.waitReadySandbox(ctx, rebuildNS, name+"-"+n.name)
			leaving[sb] = name
		}
		c.stopAPIServer()
	} else {
		for _, name := range r.more {
			sbs, err := n.readySandboxes(ctx, rebuildNS, name)
			if err != nil || len(sbs) != 1 {
				t.Fatalf("%s: %s's sandboxes: %+v (%v)", n.name, name, sbs, err)
			}
			leaving[sbs[0].ID] = name
		}
	}
	log := filepath.Join(n.logDir, "var-log", "stickyip.log")
	mark := fileSize(t, log)
	n.holdCheckpointd(t)
	db := filepath.Join(n.stickyipDataDir(), boltstore.DBFile)
	var damaged []byte
	if how == "deleted" {
		if err := os.Remove(db); err != nil {
			t.Fatal(err)
		}
	} else {
		damaged = overwriteStart(t, db, 32<<10)
	}
	damage := time.Now()
	var more []string
	if how != "api-away" {
		// Calls arrive at the damaged store: the last round's pods deleted
		// (their DELs), new pods created (their ADDs), each refused until
		// the store is back and retried by the kubelet.
		c.deletePods(r)
		more = c.createMore(n, how)
	} else {
		for _, name := range statics {
			if err := os.Remove(filepath.Join(n.staticPodDir(), name+".json")); err != nil {
				t.Fatal(err)
			}
		}
	}
	met := c.callsMeetDamage(n, log, mark, leaving, len(more) > 0, how)
	n.releaseCheckpointd(t)
	eventually(t, n.name+": checkpointd rebuilds the store", 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		got := n.metricInt("checkpointd_ipam_store_rebuilds_total")
		return got == before+1, fmt.Sprintf("checkpointd_ipam_store_rebuilds_total %d", got)
	})
	t.Logf("%s: store %s, rebuilt by checkpointd %s after the damage (held until %s)", n.name, how, time.Since(damage).Round(100*time.Millisecond), met)
	n.requireDistinct("after the rebuild (" + how + ")")
	// The DELs refused by the damaged store, retried by the kubelet, go
	// through on the rebuilt one.
	eventually(t, n.name+": the DELs of the pods deleted at the damage, on the rebuilt store", 2*time.Minute, time.Second, func() (bool, string) {
		text := readFrom(t, log, mark)
		var left []string
		for id, name := range leaving {
			if len(delsOf(text, id)) == 0 {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprintf("no DEL yet for %v", left)
	})
	if how == "api-away" {
		c.whileAPIAway(r)
		more = c.createMore(n, how)
	}
	c.requireRebuilt(r, how, damage, damaged, more)
}

// holdCheckpointd stops checkpointd (SIGSTOP) until releaseCheckpointd,
// at a moment it holds no lock on the node's store (/proc/locks): held
// with the lock, it would make every call wait for the lock instead of
// meeting the store.
func (n *node) holdCheckpointd(t testing.TB) {
	t.Helper()
	p := n.checkpointd.cmd.Process
	t.Cleanup(func() { _ = p.Signal(syscall.SIGCONT) })
	lock := filepath.Join(n.stickyipDataDir(), boltstore.LockFile)
	for range 100 {
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if !holdsFlock(t, p.Pid, lock) {
			return
		}
		if err := p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("checkpointd (pid %d) held the lock of %s at 100 tries", p.Pid, lock)
}

// holdsFlock reports whether process pid holds a lock on path, as the
// kernel lists them in /proc/locks.
func holdsFlock(t testing.TB, pid int, path string) bool {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf(":%d", st.Ino)
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(locks), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[1] != "->" && f[4] == fmt.Sprint(pid) && strings.HasSuffix(f[5], id) {
			return true
		}
	}
	return false
}

// releaseCheckpointd lets checkpointd run again.
func (n *node) releaseCheckpointd(t testing.TB) {
	t.Helper()
	if err := n.checkpointd.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// callsMeetDamage waits, checkpointd held, until the plugin's log (after
// mark) shows the round's calls refused by the damaged store: a DEL of a
// sandbox of leaving (when there is one) and, with adds, an ADD of a new
// sandbox; it fails the test when a DEL of leaving succeeded on the
// damaged store. It returns what it saw.
func (c *cluster) callsMeetDamage(n *node, log string, mark int64, leaving map[string]string, adds bool, how string) string {
	t := c.t
	t.Helper()
	var saw string
	eventually(t, n.name+": the round's calls refused by the "+how+" store", 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		text := readFrom(t, log, mark)
		for id, name := range leaving {
			if d := delsOf(text, id); len(d) > 0 {
				t.Fatalf("%s: the DEL of %s (sandbox %s) succeeded on the %s store, checkpointd held: %s", n.name, name, id, how, d[0])
			}
		}
		dels, addRefusals := 0, 0
		for _, l := range linesWith(text, `msg="call failed"`) {
			if !strings.Contains(l, reservation.ErrCorrupt.Error()) && !strings.Contains(l, reservation.ErrLost.Error()) {
				continue // not the damage's refusal
			}
			if leaving[logField(l, "container")] != "" {
				dels++
			} else {
				addRefusals++
			}
		}
		saw = fmt.Sprintf("%d DEL and %d ADD refusals", dels, addRefusals)
		return (len(leaving) == 0 || dels > 0) && (!adds || addRefusals > 0), saw
	})
	t.Logf("%s (%s): the round's calls met the damaged store, checkpointd held: %s", n.name, how, saw)
	return saw
}

// delsOf returns the plugin's log lines of a successful DEL of sandbox id.
func delsOf(text, id string) []string {
	var out []string
	for _, l := range linesWith(text, " msg=DEL ") {
		if logField(l, "container") == id {
			out = append(out, l)
		}
	}
	return out
}

// logField is the value of key in a log line of the plugin (slog's text
// format, unquoted values).
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// waitReadySandbox waits for pod namespace/name's one ready sandbox and
// returns its ID.
func (n *node) waitReadySandbox(ctx context.Context, namespace, name string) string {
	var id string
	eventually(n.t, namespace+"/"+name+" running", 2*time.Minute, time.Second, func() (bool, string) {
		sbs, err := n.readySandboxes(ctx, namespace, name)
		if err != nil || len(sbs) != 1 {
			return false, fmt.Sprintf("%+v %v", sbs, err)
		}
		id = sbs[0].ID
		return true, ""
	})
	return id
}

// createMore creates 9 pods of round how on n (not waiting for them).
func (c *cluster) createMore(n *node, how string) []string {
	var more []string
	for i := range 9 {
		more = append(more, fmt.Sprintf("more-%s-%d", how, i))
		c.createPinned(n, more[i], nil)
	}
	return more
}

// deletePods deletes the pods the last round left running (not waiting).
func (c *cluster) deletePods(r *rebuildNode) {
	for _, name := range r.more {
		c.deletePod(rebuildNS, name)
	}
	r.more = nil
}

// requireDistinct fails the test unless every address a ready sandbox of
// the node's runtime holds is held by it alone and allocated to it in the
// node's store (harness.AddressProblems); when says at what point.
func (n *node) requireDistinct(when string) {
	t := n.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, problems, err := harness.CheckAddresses(ctx, n.cri, func() []admin.Entry { return n.stickyipList(t) })
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("%s %s: addresses of ready sandboxes:\n%s", n.name, when, strings.Join(problems, "\n"))
	}
	t.Logf("%s %s: %d addresses of ready sandboxes, each held once and allocated to its sandbox", n.name, when, len(held))
}

// whileAPIAway checks the store rebuilt with the API server away, with
// calls arriving: a static pod's ADD refused (the rebuilt store waits for
// the index), db-0's sandbox stopped and started again by the kubelet with
// its address; then starts the API server and waits for the index's
// reservations, after which the static pod gets an address of its own.
func (c *cluster) whileAPIAway(r *rebuildNode) {
	t, n := c.t, r.n
	if v := n.metricInt("checkpointd_ipam_store_rebuild_waiting"); v != 1 {
		t.Fatalf("%s: checkpointd_ipam_store_rebuild_waiting %d with the API server away, want 1", n.name, v)
	}
	c.requireOnlyRunning(r, "with the API server away")
	ctx := context.Background()

	// A static pod: its ADD asks for an address no pod holds yet.
	log := filepath.Join(n.logDir, "var-log", "stickyip.log")
	mark := fileSize(t, log)
	static := staticPod(rebuildNS, "static-api-away")
	writeFile(t, filepath.Join(n.staticPodDir(), "static-api-away.json"), static, 0o644)
	eventually(t, n.name+": the static pod's ADD refused while the store waits for the index", 2*time.Minute, time.Second, func() (bool, string) {
		refused := linesWith(readFrom(t, log, mark), ipam.ErrRebuildWait.Error())
		return len(refused) > 0, "no refused ADD in " + log
	})
	if sbs, err := n.readySandboxes(ctx, rebuildNS, "static-api-away-"+n.name); err != nil || len(sbs) > 0 {
		t.Fatalf("%s: the static pod runs while the store waits for the index: %+v (%v)", n.name, sbs, err)
	}

	// db-0's sandbox stops (its DEL leaves db-0's reservation) and the
	// kubelet starts a new one (its ADD takes the reservation).
	old, err := n.readySandboxes(ctx, rebuildNS, "db-0")
	if err != nil || len(old) != 1 {
		t.Fatalf("%s: db-0's sandboxes: %+v (%v)", n.name, old, err)
	}
	if err := n.cri.StopPod(ctx, old[0].ID); err != nil {
		t.Fatalf("%s: stop db-0's sandbox: %v", n.name, err)
	}
	eventually(t, "db-0's new sandbox with its address", 2*time.Minute, time.Second, func() (bool, string) {
		sbs, err := n.readySandboxes(ctx, rebuildNS, "db-0")
		return err == nil && len(sbs) == 1 && sbs[0].ID != old[0].ID && sbs[0].IP == r.ips["db-0"], fmt.Sprintf("%+v %v", sbs, err)
	})
	n.requireDistinct("with the API server away, db-0's sandbox started again")
	c.requireOnlyRunning(r, "with the API server away, after db-0's new sandbox")
	t.Logf("%s: rebuilt with the API server away: every running pod's address allocated, gone's not yet reserved; a static pod's ADD refused, db-0's new sandbox given its address", n.name)

	start := time.Now()
	c.startControlPlane()
	eventually(t, n.name+": the index's reservations restored", 2*time.Minute, time.Second, func() (bool, string) {
		v := n.metricInt("checkpointd_ipam_store_rebuild_waiting")
		return v == 0, fmt.Sprintf("checkpointd_ipam_store_rebuild_waiting %d", v)
	})
	t.Logf("%s: the index's reservations restored %s after the API server started; Event: %s", n.name,
		time.Since(start).Round(100*time.Millisecond), c.nodeEvent(n.name, rebuild.EventRestored))
	var ip string
	eventually(t, "the static pod running once the wait is over", 2*time.Minute, time.Second, func() (bool, string) {
		sbs, err := n.readySandboxes(ctx, rebuildNS, "static-api-away-"+n.name)
		if err != nil || len(sbs) != 1 {
			return false, fmt.Sprintf("%+v %v", sbs, err)
		}
		ip = sbs[0].IP
		return true, ""
	})
	if ip == r.ips["gone"] {
		t.Fatalf("%s: the static pod got %s, gone's reserved address", n.name, ip)
	}
	n.requireDistinct("once the wait is over, the static pod running with " + ip)
	if err := os.Remove(filepath.Join(n.staticPodDir(), "static-api-away.json")); err != nil {
		t.Fatal(err)
	}
}

// requireOnlyRunning checks, with the API server away, that each running
// pod's address is allocated to it and that gone's has no record (only
// the index knows it).
func (c *cluster) requireOnlyRunning(r *rebuildNode, when string) {
	t, n := c.t, r.n
	byIP := map[string]string{}
	for _, e := range n.stickyipList(t) {
		byIP[e.IP] = e.State + " " + e.Namespace + "/" + e.Name
	}
	for name, ip := range r.ips {
		want := "allocated " + rebuildNS + "/" + name
		if name == "gone" {
			if s := byIP[ip]; s != "" {
				t.Fatalf("%s %s: gone's %s is %q before the index could be read, want no record (only the index knows it)", n.name, when, ip, s)
			}
			continue
		}
		if byIP[ip] != want {
			t.Fatalf("%s %s: %s's %s is %q, want %q", n.name, when, name, ip, byIP[ip], want)
		}
	}
}

// requireRebuilt checks a rebuilt node: the round's new pods (more) run,
// none with gone's address, every ready sandbox's address its own; gone
// and db-0 come back with theirs.
func (c *cluster) requireRebuilt(r *rebuildNode, how string, damage time.Time, damaged []byte, more []string) {
	t, n := c.t, r.n
	got := map[string]string{}
	for i, name := range more {
		got[name] = n.waitPodRunningIn(rebuildNS, name, 2*time.Minute)
		if i == 0 {
			t.Logf("%s: pod %s runs with %s %s after the damage", n.name, name, got[name], time.Since(damage).Round(100*time.Millisecond))
		}
		if got[name] == r.ips["gone"] {
			t.Fatalf("%s: pod %s got %s, gone's reserved address", n.name, name, got[name])
		}
	}
	r.more = more
	n.requireDistinct("with the round's new pods running (" + how + ")")
	c.createPinned(n, "gone", map[string]string{annReservation: "10m"})
	if ip := n.waitPodRunningIn(rebuildNS, "gone", 2*time.Minute); ip != r.ips["gone"] {
		t.Fatalf("%s: gone re-created got %s, want its reserved %s", n.name, ip, r.ips["gone"])
	}
	c.deletePod(rebuildNS, "db-0")
	eventually(t, "db-0 re-created", 2*time.Minute, time.Second, func() (bool, string) {
		uid := c.podUID(rebuildNS, "db-0")
		return uid != "" && uid != r.dbUID, "uid " + uid
	})
	r.dbUID = c.podUID(rebuildNS, "db-0")
	if ip := n.waitPodRunningIn(rebuildNS, "db-0", 2*time.Minute); ip != r.ips["db-0"] {
		t.Fatalf("%s: db-0 re-created got %s, want its own %s", n.name, ip, r.ips["db-0"])
	}
	n.requireDistinct("with gone and db-0 back (" + how + ")")
	run(t, filepath.Join(n.bins.project, "stickyip"), "--data-dir", n.stickyipDataDir(), "check")
	if damaged != nil {
		requireKept(t, n.stickyipDataDir(), damaged)
	}
	ev := c.nodeEvent(n.name, rebuild.EventRebuilt)
	if !strings.Contains(ev, "Rebuilt from") {
		t.Fatalf("%s: %s Event %q", n.name, rebuild.EventRebuilt, ev)
	}
	t.Logf("%s (%s): %d new pods got %v; gone and db-0 got their addresses back; stickyip check ok; Event: %s", n.name, how, len(more), got, ev)
	c.goneReserved(r)
}

// createPinned creates pod name in rebuildNS bound to n.
func (c *cluster) createPinned(n *node, name string, ann map[string]string) {
	c.createOn(n, rebuildNS, name, ann)
}

// goneReserved deletes pod gone and waits until its node's record says
// when its reservation ends.
func (c *cluster) goneReserved(r *rebuildNode) {
	r.n.deletePodGracefullyIn(rebuildNS, "gone", 2*time.Minute)
	eventually(c.t, "gone's reservation in its node's record", time.Minute, time.Second, func() (bool, string) {
		e, ok := c.entriesOf(r.n.name)[rebuildNS+"/gone"]
		return ok && !e.Running(), fmt.Sprintf("entry %+v", e)
	})
}

// podUID is the UID of pod ns/name ("" when there is none).
func (c *cluster) podUID(ns, name string) string {
	p, err := c.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return string(p.UID)
}

// metricInt reads an integer sample of checkpointd's /metrics (0 when not
// exposed or unreadable).
func (n *node) metricInt(name string) int {
	v, err := n.metric(name)
	if err != nil {
		return 0
	}
	var i int
	fmt.Sscan(v, &i)
	return i
}

// overwriteStart overwrites the first size bytes of path and returns the
// file as it is then.
func overwriteStart(t interface {
	Helper()
	Fatal(...any)
}, path string, size int) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("damaged!"), size/8), 0); err != nil {
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

// requireKept fails unless a file the rebuild kept in dir holds damaged.
func requireKept(t interface {
	Helper()
	Fatalf(string, ...any)
}, dir string, damaged []byte) {
	t.Helper()
	kept, _ := filepath.Glob(filepath.Join(dir, boltstore.AsidePrefix+"*"))
	for _, k := range kept {
		if b, err := os.ReadFile(k); err == nil && bytes.Equal(b, damaged) {
			return
		}
	}
	t.Fatalf("no file of %v holds the damaged bytes", kept)
}

// staticPod is the manifest (JSON) of a static pod ns/name running
// testPod's container; the kubelet names it <name>-<node>.
func staticPod(ns, name string) []byte {
	p := testPod(name, nil)
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	p.Namespace, p.Spec.NodeName = ns, ""
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}
