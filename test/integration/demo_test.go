//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// `make demo` (scripts/demo.sh), run as a user runs it: the story it prints
// holds, and nothing it made is left on the host — also when the product is
// broken and when it is interrupted.

// TestDemo runs `make demo`, the README's first command after make install:
// db-0, annotated, gets the same address back after it is deleted and
// created again; meanwhile `stickyip list` shows the address reserved and
// another pod asking for it is refused, and gets another one unasked; web-0,
// not annotated, comes back with a different address. Read from what the demo
// prints, not from its own verdict.
func TestDemo(t *testing.T) {
	harness.RequireRoot(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotHost(t)
	cmd := demoCommand(t, []string{"OUT=" + harness.OutputDir()}, "make", "-C", root, "--no-print-directory", "demo")
	out, err := cmd.CombinedOutput()
	t.Logf("make demo:\n%s", out)
	if err != nil {
		t.Fatalf("make demo: %v", err)
	}
	text := string(out)
	db0 := demoMatch(t, text, `(?m)^   demo/db-0 +reserved-ip-duration "10" +eth0 (\S+)$`)
	web0 := demoMatch(t, text, `(?m)^   demo/web-0 +no annotation +eth0 (\S+)$`)
	if db0 == web0 {
		t.Fatalf("db-0 and web-0 both got %s", db0)
	}
	q := regexp.QuoteMeta
	demoMatch(t, text, `(?m)^   (stickyip-demo +`+q(db0)+` +reserved +demo/db-0) `)
	if regexp.MustCompile(`(?m)^   stickyip-demo +` + q(web0) + ` +reserved `).MatchString(text) {
		t.Errorf("web-0's %s, not annotated, is listed as reserved", web0)
	}
	demoMatch(t, text, `(?m)^   refused: .*(`+q(db0)+` is reserved for demo/db-0)`)
	if cache0 := demoMatch(t, text, `(?m)^   Not asking, it gets eth0 (\S+)\.$`); cache0 == db0 {
		t.Errorf("demo/cache-0 got db-0's reserved %s without asking", db0)
	}
	if again := demoMatch(t, text, `(?m)^   demo/db-0 +eth0 (\S+) +\(was `+q(db0)+`\)$`); again != db0 {
		t.Errorf("db-0 came back with %s, want its %s", again, db0)
	}
	if again := demoMatch(t, text, `(?m)^   demo/web-0 +eth0 (\S+) +\(was `+q(web0)+`\)$`); again == web0 {
		t.Errorf("web-0 (no annotation) came back with its %s: want another address", web0)
	}
	requireHostAsBefore(t, before, cmd.Process.Pid)
}

// TestDemoBrokenPlugin: a plugin that frees a reserved address at DEL (the
// regression the demo exists to show) makes the demo say FAILED and exit 1,
// and it still removes everything it made.
func TestDemoBrokenPlugin(t *testing.T) {
	harness.RequireRoot(t)
	before := snapshotHost(t)
	real := stickyipBin(t)
	// The real plugin, then, after db-0's DEL, the operator tool's release
	// (the binary is the tool when CNI_COMMAND is unset).
	broken := demoWrapper(t, fmt.Sprintf(`%[1]q "$@"; st=$?
case "$CNI_COMMAND $CNI_ARGS" in
"DEL "*K8S_POD_NAME=db-0*) env -u CNI_COMMAND %[1]q release demo/db-0 --cni-conf-dir "$NETCONFPATH" >&2 ;;
esac
exit $st
`, real))
	cmd := demoScript(t, broken)
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/demo.sh with a plugin that frees reservations:\n%s", out)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("demo with a broken plugin: %v, want exit status 1", err)
	}
	demoMatch(t, string(out), `(?m)^demo: FAILED: (\S+ is not listed as reserved for demo/db-0)$`)
	demoMatch(t, string(out), `(?m)^(Cleaned up: )`)
	requireHostAsBefore(t, before, cmd.Process.Pid)
}

// TestDemoInterrupted: Ctrl-C (SIGINT to the demo's process group, as a
// terminal sends it) while a pod's ADD runs ends the demo with status 130 and
// removes everything it made.
func TestDemoInterrupted(t *testing.T) {
	harness.RequireRoot(t)
	before := snapshotHost(t)
	mark := filepath.Join(t.TempDir(), "web-0-adding")
	// The real plugin, but web-0's ADD leaves a mark and waits to be interrupted.
	slow := demoWrapper(t, fmt.Sprintf(`case "$CNI_COMMAND $CNI_ARGS" in
"ADD "*K8S_POD_NAME=web-0*) : >%q; exec sleep 120 ;;
esac
exec %q "$@"
`, mark, stickyipBin(t)))
	cmd := demoScript(t, slow)
	// A file, not a pipe: readable while the demo runs.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "demo.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	output := func() string { b, _ := os.ReadFile(outFile.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default: // not interrupted in time: end it and its group, by the PID started here
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	})
	err = harness.Eventually(30*time.Second, 20*time.Millisecond, func() error {
		if _, err := os.Stat(mark); err != nil {
			return fmt.Errorf("web-0's ADD not reached: %v\n%s", err, output())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("demo still running 30 s after SIGINT:\n%s", output())
	}
	t.Logf("scripts/demo.sh interrupted during web-0's ADD:\n%s", output())
	var exit *exec.ExitError
	if !errors.As(waitErr, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("interrupted demo: %v, want exit status 130", waitErr)
	}
	demoMatch(t, output(), `(?m)^(Cleaned up: )`)
	requireHostAsBefore(t, before, pgid)
}

// demoScript is scripts/demo.sh with stickyip as its plugin and the
// harness's cnitool and bridge.
func demoScript(t *testing.T, stickyip string) *exec.Cmd {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return demoCommand(t, []string{"STICKYIP=" + stickyip, "OUT=" + harness.OutputDir()}, filepath.Join(root, "scripts", "demo.sh"))
}

// demoCommand is argv with env added, in a process group of its own (the
// demo's PID is its group's ID), killed with its group if it runs past the
// test's deadline.
func demoCommand(t *testing.T, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// demoWrapper writes a shell script standing in for the plugin and returns
// its path.
func demoWrapper(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stickyip")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// demoMatch returns the first group of re in the demo's output, failing the
// test when the output has no such line.
func demoMatch(t *testing.T, out, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the demo printed no line matching %s", re)
	}
	return m[1]
}

// hostState is what the demo may not change on the host.
type hostState struct {
	netns, links, mounts, demoDirs []string
	// trees lists the host's CNI configuration and stores, one line per
	// file (path, mode, size, modification time); "absent" when missing.
	trees []string
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	var s hostState
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			s.netns = append(s.netns, e.Name())
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		s.links = append(s.links, i.Name)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			s.mounts = append(s.mounts, f[4])
		}
	}
	s.demoDirs, _ = filepath.Glob("/tmp/stickyip-demo.*")
	for _, dir := range []string{"/etc/cni/net.d", "/var/lib/cni"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			s.trees = append(s.trees, fmt.Sprintf("%s %v %d %s", p, fi.Mode(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano)))
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			s.trees = append(s.trees, dir+" absent")
		} else if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(s.mounts)
	return s
}

// requireHostAsBefore fails the test when the host differs from before or a
// process of the demo's group pgid is still alive.
func requireHostAsBefore(t *testing.T, before hostState, pgid int) {
	t.Helper()
	after := snapshotHost(t)
	for _, c := range []struct {
		what    string
		was, is []string
	}{
		{"network namespaces (/run/netns)", before.netns, after.netns},
		{"links of the host's network namespace", before.links, after.links},
		{"mounts", before.mounts, after.mounts},
		{"demo directories /tmp/stickyip-demo.*", before.demoDirs, after.demoDirs},
		{"/etc/cni/net.d and /var/lib/cni", before.trees, after.trees},
	} {
		if !slices.Equal(c.was, c.is) {
			t.Errorf("%s changed by the demo:\nbefore %q\nafter  %q", c.what, c.was, c.is)
		}
	}
	err := harness.Eventually(10*time.Second, 20*time.Millisecond, func() error {
		if left := groupMembers(pgid); len(left) > 0 {
			return fmt.Errorf("processes of the demo's group %d still running: %v", pgid, left)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// groupMembers lists the live (not zombie) processes of process group pgid.
func groupMembers(pgid int) []string {
	var out []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: the fields after the command name.
		i := bytes.LastIndexByte(data, ')')
		if f := strings.Fields(string(data[i+1:])); len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, string(data[:i+1]))
		}
	}
	return out
}
