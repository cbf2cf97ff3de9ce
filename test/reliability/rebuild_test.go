//go:build reliability

package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// TestRebuildCrash: checkpointd's store rebuild (its one-shot form,
// `checkpointd rebuild-store`, the same code the daemon runs) killed with
// SIGKILL at a random moment, over and over, on a store whose first 32 KiB
// were overwritten or whose file was deleted. After every kill the data
// directory holds either the damage as it was (every call refused: the
// damaged bytes in place, or no file under the creation mark) or the whole
// rebuilt store; never a store that calls would use without the running
// sandboxes' addresses. A plugin ADD right after the kill must be refused
// (102) while the store is damaged or lost, and, once it is rebuilt,
// succeed with an address no other holds: every address in use — the
// sandboxes' and the new one — allocated to its own holder alone
// (harness.AddressProblems); the next rebuild completes, the damaged bytes
// kept under exactly one name. Besides the random kills, a few rounds kill
// the rebuild on purpose between keeping the damaged file and putting the
// new store in place (the rename held back by strace, killRebuildAtRename):
// that moment must have been hit at least once. The runtime is a CRI server
// of the test's (the sandboxes, their status and namespaces); the CNI
// result cache is libcni's format, written by the test.
func TestRebuildCrash(t *testing.T) {
	p := newPlugin(t)
	bin := filepath.Join(filepath.Dir(p.Path), "checkpointd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing (make build)", bin)
	}
	rng := newRand(t)
	rounds := envInt(t, "RELIABILITY_REBUILD_KILLS", 60)
	f := &figures{}
	base := t.TempDir()
	netns := newNetnsPool(t, 8)
	w := newRebuildWorld(t, p, base, netns)
	full := w.timeRebuild(t, bin) // an uninterrupted run sets the kill window
	targeted := envInt(t, "RELIABILITY_REBUILD_AT_RENAME", 2)
	for i := range rounds + targeted {
		damage := []string{"overwritten", "deleted"}[i%2]
		var dir string
		var damaged []byte
		if i < rounds {
			dir, damaged = w.damagedCopy(t, i, damage)
			o, killed := killProcessAfter(func(ctx context.Context) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
				return w.command(ctx, bin, dir)
			}, killDelay(rng.Int64N, i, full))
			switch {
			case killed:
				f.add("kills during a rebuild", 1)
			case o.ExitCode != 0:
				t.Fatalf("round %d: rebuild-store failed unkilled: %s", i, o.Describe())
			}
		} else {
			dir, damaged = w.damagedCopy(t, i, "overwritten")
			w.killRebuildAtRename(t, bin, dir)
			f.add("kills during a rebuild", 1)
		}
		between := f.get(betweenKills)
		state := w.afterKill(t, dir, damaged, f)
		f.add("state after the kill: "+state, 1)
		if i >= rounds && f.get(betweenKills) == between {
			t.Errorf("round %d: killed at the rename of the new store, the data directory is %s, not the damage kept aside and in place", i, state)
		}
		w.lateAdd(t, dir, fmt.Sprintf("late-%d", i), state, f)
		if state != "rebuilt" {
			if o := w.rebuild(bin, dir); o.ExitCode != 0 {
				t.Fatalf("round %d: rebuild after the kill: %s", i, o.Describe())
			}
			if got := w.afterKill(t, dir, damaged, f); got != "rebuilt" {
				f.add("inconsistencies (must be 0)", 1)
				t.Errorf("round %d: after the second rebuild the store is %s", i, got)
			}
		}
	}
	report(t, "rebuild crash", f, fmt.Sprintf("uninterrupted rebuild-store: %s (%d sandboxes)", full.Round(time.Millisecond), w.n))
	if f.get("inconsistencies (must be 0)") > 0 || f.get("duplicates (must be 0)") > 0 {
		t.Fatal("inconsistencies after kills")
	}
	if f.get(betweenKills) == 0 {
		t.Fatalf("no kill landed %s: the test never saw the state that moment leaves", strings.TrimPrefix(betweenKills, "kills "))
	}
}

// betweenKills counts the kills that left the damaged file both kept
// aside and in place: after keepAside, before the new store's rename.
const betweenKills = "kills between keeping the damaged file and putting the new one in place"

// lateAdd runs a new pod's ADD on dir after a kill that left it in state:
// refused (102) while the store is damaged or lost — a success there is an
// inconsistency, and a duplicate too when its address is in use —, and
// once rebuilt a success whose address the store allocates to it alone,
// every sandbox's still to its own (harness.AddressProblems).
func (w *rebuildWorld) lateAdd(t *testing.T, dir, name, state string, f *figures) {
	t.Helper()
	add := w.add(t, dir, name)
	if !add.OK() {
		if state == "rebuilt" || add.Err == nil || add.Err.Code != 102 {
			f.add("inconsistencies (must be 0)", 1)
			t.Errorf("%s (%s): ADD after the kill: %s", name, state, add.Describe())
		}
		return
	}
	held := slices.Clone(w.sandboxes)
	for _, a := range add.Result.Addrs() {
		held = append(held, harness.HeldAddress{IP: strings.Split(a, "/")[0], Sandbox: "ctr-" + name, Pod: "crash/" + name})
	}
	if state != "rebuilt" {
		f.add("inconsistencies (must be 0)", 1)
		t.Errorf("%s: an ADD on the %s store succeeded with %v: it must be refused (102)", name, state, add.Result.Addrs())
		if slices.ContainsFunc(add.Result.Addrs(), func(a string) bool { return w.held[strings.Split(a, "/")[0]] }) {
			f.add("duplicates (must be 0)", 1)
			t.Errorf("%s (%s): the ADD got %v, held by a running sandbox", name, state, add.Result.Addrs())
		}
		return
	}
	if problems := harness.AddressProblems(held, w.p.List(t, dir)); len(problems) > 0 {
		f.add("duplicates (must be 0)", 1)
		t.Errorf("%s (rebuilt): after its ADD got %v:\n%s", name, add.Result.Addrs(), strings.Join(problems, "\n"))
	}
}

// killRebuildAtRename runs the rebuild on dir under strace, every rename
// held back on entry (delay_enter), and SIGKILLs it once the damaged file
// has its kept name: between keepAside and the rename that puts the new
// store in place, a moment a random kill rarely hits.
func (w *rebuildWorld) killRebuildAtRename(t *testing.T, bin, dir string) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		harness.Missing(t, "strace not installed (make reliability-deps installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	rebuild, stdout, stderr := w.command(ctx, bin, dir)
	renames := "rename,renameat,renameat2"
	cmd := exec.CommandContext(ctx, strace, append([]string{"-qq", "-f", "-o", "/dev/null", "-e", "trace=" + renames,
		"-e", "inject=" + renames + ":delay_enter=2000000", "--"}, rebuild.Args...)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kept := func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, dbName+".damaged-*"))
		return len(m) > 0
	}
	for !kept() && ctx.Err() == nil {
		time.Sleep(2 * time.Millisecond)
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	var pid int
	if _, serr := fmt.Sscan(string(children), &pid); err != nil || serr != nil {
		t.Fatalf("the rebuild under strace (pid %d): no child (%v %v); stderr: %s", cmd.Process.Pid, err, serr, stderr)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// killDelay is when round i kills the rebuild: uniform over an
// uninterrupted run (full) in half the rounds; in the others over its second half,
// where the new store is written and put in place (the first half is mostly
// the process starting and reading its sources).
func killDelay(n func(int64) int64, i int, full time.Duration) time.Duration {
	if i%4 < 2 {
		return time.Duration(n(int64(full)))
	}
	return full/2 + time.Duration(n(int64(full/2)))
}

// rebuildWorld is a node for the rebuild: sandboxes the test's CRI server
// lists, their CNI results in a cache directory, and the pristine store the
// plugin made for them.
type rebuildWorld struct {
	p         *plugin
	base      string
	conf      map[string]any
	sock      string
	cacheDir  string
	pristine  string                // a data directory with the store the plugin wrote
	n         int                   // sandboxes
	held      map[string]bool       // every address a sandbox holds
	sandboxes []harness.HeldAddress // the same, with their holders
}

func newRebuildWorld(t *testing.T, p *plugin, base string, netns *netnsPool) *rebuildWorld {
	w := &rebuildWorld{p: p, base: base, cacheDir: filepath.Join(base, "results"), pristine: filepath.Join(base, "pristine", "data"),
		sock: filepath.Join(base, "cri.sock"), held: map[string]bool{}}
	w.conf = netConf("rebuildnet", w.pristine, "", []string{"10.251.0.0/24"}, []string{"fd00:252::/120"})
	cri, err := harness.StartFakeCRI(w.sock)
	must(t, err)
	t.Cleanup(cri.Stop)
	for i := range 8 {
		name, cid := fmt.Sprintf("p%d", i), fmt.Sprintf("sandbox%02d", i)
		ann := map[string]string{}
		if i%2 == 0 {
			ann[annoDuration] = "30"
		}
		args := podArgs("crash", name, "uid-"+name, cid)
		o := p.CNI(cniCall{Command: "ADD", ContainerID: cid, Netns: netns.Path(i), IfName: "eth0", Args: args,
			Stdin: encodeConf(t, withAnnotations(w.conf, ann))})
		if !o.OK() {
			t.Fatalf("ADD %s: %s", name, o.Describe())
		}
		sb := harness.FakeSandbox{ID: cid, Namespace: "crash", Name: name, UID: "uid-" + name, Annotations: ann,
			IPs: o.Result.Addrs(), Netns: netns.Path(i)}
		for _, a := range sb.IPs {
			w.held[strings.Split(a, "/")[0]] = true
			w.sandboxes = append(w.sandboxes, harness.HeldAddress{IP: strings.Split(a, "/")[0], Sandbox: cid, Pod: "crash/" + name})
		}
		cri.Add(sb)
		must(t, harness.WriteCNIResult(w.cacheDir, "rebuildnet", sb, args))
		w.n++
	}
	p.RequireCheckOK(t, w.pristine, "the store the plugin wrote")
	return w
}

// damagedCopy copies the pristine store to a round's data directory and
// damages it; it returns the directory and the damaged bytes (nil: deleted).
func (w *rebuildWorld) damagedCopy(t *testing.T, round int, damage string) (string, []byte) {
	dir := filepath.Join(w.base, fmt.Sprintf("round-%03d", round), "data")
	must(t, os.MkdirAll(dir, 0o755))
	for _, f := range []string{dbName, lockName, "stickyip.created"} {
		b, err := os.ReadFile(filepath.Join(w.pristine, f))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	// The network's config, as the runtime reads it, keeps its records in dir.
	confDir := filepath.Join(filepath.Dir(dir), "net.d")
	must(t, os.MkdirAll(confDir, 0o755))
	ipam := maps.Clone(ipamOf(w.conf))
	ipam["dataDir"] = dir
	list := map[string]any{"cniVersion": testCNIVersion, "name": "rebuildnet", "plugins": []any{map[string]any{"type": "bridge", "ipam": ipam}}}
	b, err := json.Marshal(list)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(confDir, "10-rebuildnet.conflist"), b, 0o644))
	db := filepath.Join(dir, dbName)
	if damage == "deleted" {
		must(t, os.Remove(db))
		return dir, nil
	}
	writeRandom(t, db, 0, 32<<10, false)
	damaged, err := os.ReadFile(db)
	must(t, err)
	return dir, damaged
}

func (w *rebuildWorld) command(ctx context.Context, bin, dir string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, bin, "rebuild-store", "--data-dir", dir, "--cni-conf-dir", filepath.Join(filepath.Dir(dir), "net.d"),
		"--cri-endpoint", "unix://"+w.sock, "--cni-results-dir", w.cacheDir, "--checkpoint-dir", filepath.Join(w.base, "checkpoints"),
		"--volume-dir", filepath.Join(w.base, "volumes"), "--node-name", "node1", "--log-level", "warn")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// rebuild runs rebuild-store to its end.
func (w *rebuildWorld) rebuild(bin, dir string) *outcome {
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd, stdout, stderr := w.command(ctx, bin, dir)
	start := time.Now()
	err := cmd.Run()
	return harness.Collect(cmd, err, stdout, stderr, time.Since(start), ctx)
}

// timeRebuild times uninterrupted rebuilds of a damaged copy (the shortest
// of three: a kill delay beyond it would often find the rebuild done), and
// checks each.
func (w *rebuildWorld) timeRebuild(t *testing.T, bin string) time.Duration {
	shortest := time.Hour
	for i := range 3 {
		dir, damaged := w.damagedCopy(t, 1000+i, "overwritten")
		start := time.Now()
		o := w.rebuild(bin, dir)
		if o.ExitCode != 0 {
			t.Fatalf("rebuild-store: %s", o.Describe())
		}
		shortest = min(shortest, time.Since(start))
		if got := w.afterKill(t, dir, damaged, &figures{}); got != "rebuilt" || t.Failed() {
			t.Fatalf("an uninterrupted rebuild left the store %s:\n%s", got, o.Stderr)
		}
	}
	return shortest
}

// afterKill says what a data directory holds after a rebuild was killed,
// and fails the test on anything but the damage as it was or the whole
// rebuilt store: "damaged", "lost" or "rebuilt".
func (w *rebuildWorld) afterKill(t *testing.T, dir string, damaged []byte, f *figures) string {
	t.Helper()
	bad := func(format string, args ...any) {
		f.add("inconsistencies (must be 0)", 1)
		t.Errorf(format, args...)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, dbName+".damaged-*"))
	for _, k := range kept {
		if b, err := os.ReadFile(k); err != nil || !bytes.Equal(b, damaged) {
			bad("%s does not hold the damaged bytes (%v)", k, err)
		}
	}
	if len(kept) > 1 || (damaged == nil && len(kept) > 0) {
		bad("damaged store kept as %v", kept)
	}
	if _, err := os.Stat(filepath.Join(dir, dbName+".rebuild")); err == nil {
		f.add("kills that left a new store half written (never used)", 1)
	}
	cur, err := os.ReadFile(filepath.Join(dir, dbName))
	if len(kept) == 1 && bytes.Equal(cur, damaged) {
		f.add(betweenKills, 1)
	}
	switch {
	case os.IsNotExist(err):
		return "lost"
	case err != nil:
		t.Fatal(err)
	case damaged != nil && bytes.Equal(cur, damaged):
		return "damaged"
	}
	if o := w.p.Check(dir); o.ExitCode != 0 {
		bad("the store after the rebuild: %s", o.Describe())
		return "broken"
	}
	if damaged != nil && len(kept) != 1 {
		bad("rebuilt, but the damaged bytes are kept as %v", kept)
	}
	got := map[string]bool{}
	for _, e := range w.p.Held(t, dir) {
		if e.State == "allocated" && strings.HasPrefix(e.ContainerID, "sandbox") {
			got[e.IP] = true
		}
	}
	for ip := range w.held {
		if !got[ip] {
			bad("rebuilt store lacks the running sandbox's %s", ip)
		}
	}
	return "rebuilt"
}

// add runs a new pod's ADD on the data directory dir.
func (w *rebuildWorld) add(t *testing.T, dir, name string) *outcome {
	conf := netConf("rebuildnet", dir, "", []string{"10.251.0.0/24"}, []string{"fd00:252::/120"})
	return w.p.CNI(cniCall{Command: "ADD", ContainerID: "ctr-" + name, Netns: goneNetns(t), IfName: "eth0",
		Args: podArgs("crash", name, "uid-"+name, "ctr-"+name), Stdin: encodeConf(t, conf)})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
