//go:build e2e

package e2e

import (
	"errors"
	"fmt"
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

// proc is a long-running component started by the test inside the node's
// network namespace. Its output goes to <logDir>/<name>.log, appended, so a
// restarted component keeps one log.
type proc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	logPath string
	started time.Time
}

// startProc starts argv inside the network namespace at netnsPath and,
// when mnt is not nil, the mount namespace mnt (with nsenter, which only
// switches namespaces and then execs, so the PID is the component's own),
// with env added to its environment. The process is killed at test cleanup
// if it is still running.
func startProc(t testing.TB, logDir, netnsPath string, mnt *harness.MountNS, env []string, name string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: open log: %v", name, err)
	}
	fmt.Fprintf(logf, "\n==== %s start %s: %s\n", time.Now().Format(time.RFC3339), name, strings.Join(argv, " "))
	nsenter := harness.Nsenter(netnsPath, mnt, argv...)
	cmd := exec.Command(nsenter[0], nsenter[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("%s: start: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{}), logPath: logPath, started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t, syscall.SIGKILL, 5*time.Second) })
	t.Logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	return p
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends sig to the process (by PID), waits up to timeout, then kills it.
// Safe to call more than once.
func (p *proc) stop(t testing.TB, sig syscall.Signal, timeout time.Duration) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Logf("%s (pid %d) did not exit in %s after %v; killing", p.name, p.cmd.Process.Pid, timeout, sig)
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
		}
	}
}

// exited returns a non-nil error when the process has exited.
func (p *proc) exited() error {
	if p.running() {
		return nil
	}
	if p.err == nil {
		return fmt.Errorf("%s exited (status 0); see %s", p.name, p.logPath)
	}
	return fmt.Errorf("%s exited: %v; see %s", p.name, p.err, p.logPath)
}

// printTails names the log of every process given that was started (nil
// ones are skipped), for a failed test. Their last lines are not copied into
// the test's output, where they would bury the failure itself:
// scripts/run-e2e.sh prints them for a failed test before the group's
// output, so the failure stays at the end, next to its "--- FAIL" line.
func printTails(t testing.TB, procs ...*proc) {
	var paths []string
	for _, p := range procs {
		if p != nil {
			paths = append(paths, p.logPath)
		}
	}
	if len(paths) > 0 {
		t.Logf("logs (their last lines are printed by scripts/run-e2e.sh before this test's output): %s", strings.Join(paths, " "))
	}
}

// run runs a short command and fails the test when it fails.
func run(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := runErr(argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runErr runs a short command with a one-minute limit.
func runErr(argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return buf.String(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, buf.String())
		}
		return buf.String(), nil
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		return buf.String(), errors.New(strings.Join(argv, " ") + ": timed out after 1m")
	}
}

// eventually polls cond every interval until it returns true or timeout
// passes; then it fails the test with what cond last reported.
func eventually(t testing.TB, what string, timeout, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %s: %s", what, timeout, last)
		}
		time.Sleep(interval)
	}
}

// pluginCalls returns the PIDs of the stickyip processes running CNI
// command (ADD, DEL, ...) for a pod named pod: what the runtime has
// called and is waiting for (read from /proc, their environment).
func pluginCalls(command, pod string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		exe, err := os.Readlink(filepath.Join(d, "exe"))
		if err != nil || filepath.Base(exe) != "stickyip" {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		if !slices.Contains(vars, "CNI_COMMAND="+command) {
			continue
		}
		for _, v := range vars {
			if args, ok := strings.CutPrefix(v, "CNI_ARGS="); ok && slices.Contains(strings.Split(args, ";"), "K8S_POD_NAME="+pod) {
				var pid int
				fmt.Sscan(filepath.Base(d), &pid)
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// fileSize is the size of file path (0 when it does not exist yet).
func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// readFrom returns file path from offset on.
func readFrom(t testing.TB, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(offset, int64(len(b))):])
}

// linesWith returns the lines of text that contain s.
func linesWith(text, s string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
