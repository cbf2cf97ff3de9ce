//go:build reliability

package reliability

import (
	"github.com/stickyip/stickyip/test/harness"

	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// sysEvent is one system call of a traced plugin process.
type sysEvent struct {
	Name string // pwrite64, write, fdatasync, fsync, renameat, ...
	Path string // the file the fd or the rename target names
	FD   string
}

var (
	fdCall     = regexp.MustCompile(`^(\w+)\((\d+)<([^>]*)>`)
	renameCall = regexp.MustCompile(`^(renameat2?|rename)\(.*"([^"]+)"[^"]*$`)
)

// traceCNI runs one CNI call under strace and returns its outcome and the
// file-related system calls in order.
func traceCNI(t *testing.T, p *plugin, c cniCall) (*outcome, []sysEvent) {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		harness.Missing(t, "strace not installed (make reliability-deps installs it)")
	}
	traceFile := filepath.Join(t.TempDir(), "trace")
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, "-qq", "-f", "-y", "-o", traceFile,
		"-e", "trace=pwrite64,write,fdatasync,fsync,rename,renameat,renameat2", p.Path)
	cmd.Env = c.Environ(filepath.Dir(p.Path))
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	o := harness.Collect(cmd, err, &stdout, &stderr, time.Since(start), ctx)
	o.ParseCNI(c.Command)
	f, err := os.Open(traceFile)
	if err != nil {
		t.Fatalf("strace wrote no trace (ptrace not allowed here?): %v; %s", err, o.Describe())
	}
	defer f.Close()
	var evs []sysEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// Drop the pid column strace -f prints.
		if i := strings.IndexByte(line, ' '); i > 0 && strings.Trim(line[:i], "0123456789") == "" {
			line = strings.TrimLeft(line[i:], " ")
		}
		if strings.HasPrefix(line, "<...") {
			continue // the second half of a call interrupted by another thread
		}
		if m := fdCall.FindStringSubmatch(line); m != nil {
			evs = append(evs, sysEvent{Name: m[1], FD: m[2], Path: m[3]})
		} else if m := renameCall.FindStringSubmatch(line); m != nil {
			evs = append(evs, sysEvent{Name: "rename", Path: m[2]})
		}
	}
	return o, evs
}

// syncedBeforeAnswer checks, on a trace, that every write to the database is
// followed by an fsync/fdatasync of it, that a database created by rename is
// followed by an fsync of its directory, and for an ADD that all of this
// happens before the result is written to stdout.
func syncedBeforeAnswer(what, dataDir string, evs []sysEvent, answers bool) []string {
	db := filepath.Join(dataDir, dbName)
	var problems []string
	answer := len(evs)
	if answers {
		answer = -1
		for i, e := range evs {
			if e.Name == "write" && e.FD == "1" {
				answer = i
				break
			}
		}
		if answer < 0 {
			return []string{what + ": no write to stdout in the trace"}
		}
	}
	dirty, renamed, dbWrites := false, false, 0
	for _, e := range evs[:answer] {
		switch {
		case (e.Name == "pwrite64" || e.Name == "pwrite" || e.Name == "write") && e.Path == db:
			dirty = true
			dbWrites++
		case (e.Name == "fdatasync" || e.Name == "fsync") && e.Path == db:
			dirty = false
		case e.Name == "rename" && e.Path == db:
			renamed = true
		case e.Name == "fsync" && e.Path == dataDir:
			renamed = false
		}
	}
	if dbWrites == 0 {
		problems = append(problems, fmt.Sprintf("%s: the trace shows no write to %s before the answer; nothing was committed?", what, db))
	}
	if dirty {
		problems = append(problems, fmt.Sprintf("%s: the last write to %s is not followed by fsync/fdatasync before the plugin answers", what, db))
	}
	if renamed {
		problems = append(problems, fmt.Sprintf("%s: %s was created by rename without an fsync of %s before the plugin answers", what, db, dataDir))
	}
	return problems
}

// TestSyncCheckerCatches makes sure the trace checker fails on the orders
// that lose data, so TestDurabilitySync cannot pass vacuously.
func TestSyncCheckerCatches(t *testing.T) {
	const dir = "/d"
	db := filepath.Join(dir, dbName)
	w := sysEvent{Name: "pwrite64", FD: "3", Path: db}
	sync := sysEvent{Name: "fdatasync", FD: "3", Path: db}
	out := sysEvent{Name: "write", FD: "1", Path: "pipe:[1]"}
	for _, tc := range []struct {
		name    string
		evs     []sysEvent
		answers bool
		bad     bool
	}{
		{"synced then answered", []sysEvent{w, sync, w, sync, out}, true, false},
		{"answered before the sync", []sysEvent{w, sync, w, out, sync}, true, true},
		{"never synced", []sysEvent{w, w}, false, true},
		{"nothing written", []sysEvent{out}, true, true},
		{"rename without directory fsync", []sysEvent{w, sync, {Name: "rename", Path: db}, out}, true, true},
		{"rename with directory fsync", []sysEvent{w, sync, {Name: "rename", Path: db}, {Name: "fsync", FD: "4", Path: dir}, out}, true, false},
	} {
		if got := len(syncedBeforeAnswer(tc.name, dir, tc.evs, tc.answers)) > 0; got != tc.bad {
			t.Errorf("%s: checker says bad=%v, want %v", tc.name, got, tc.bad)
		}
	}
}

// TestDurabilitySync checks the durability promise on the real binary: an
// ADD's result reaches stdout only after its transaction is on disk (data
// and meta pages written and synced; a new database's directory entry
// synced), and a DEL, GC or operator release returns only after its commit
// is synced. Power loss itself is not simulated; this checks the order of
// the system calls that make a commit survive one.
func TestDurabilitySync(t *testing.T) {
	p := newPlugin(t)
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	conf := netConf("durnet", dataDir, filepath.Join(base, "plugin.log"))
	ns := goneNetns(t)
	call := func(command, name string, annotations map[string]string) cniCall {
		c := "c-" + name
		return cniCall{Command: command, ContainerID: c, Netns: ns, IfName: "eth0",
			Args: podArgs("default", name, "uid-"+name, c), Stdin: encodeConf(t, withAnnotations(conf, annotations))}
	}
	steps := []struct {
		what    string
		call    cniCall
		answers bool
	}{
		{"first ADD (creates the database)", call("ADD", "a", map[string]string{annoDuration: "10"}), true},
		{"second ADD", call("ADD", "b", nil), true},
		{"DEL into a reservation", call("DEL", "a", map[string]string{annoDuration: "10"}), false},
		{"DEL freeing", call("DEL", "b", nil), false},
		{"ADD taking the reservation back", call("ADD", "a", map[string]string{annoDuration: "10"}), true},
		{"GC", cniCall{Command: "GC", Stdin: encodeConf(t, withValidAttachments(conf, nil))}, false},
	}
	for _, s := range steps {
		o, evs := traceCNI(t, p, s.call)
		if !o.OK() {
			t.Fatalf("%s: %s", s.what, o.Describe())
		}
		for _, problem := range syncedBeforeAnswer(s.what, dataDir, evs, s.answers) {
			t.Error(problem)
		}
	}
	if es := p.Held(t, dataDir); len(es) != 1 || es[0].State != "reserved" || es[0].Name != "a" {
		t.Errorf("after the traced calls the store should hold default/a reserved (GC treats it as deleted): %v", es)
	}
}
