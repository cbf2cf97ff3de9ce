package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readyTimeout bounds a runtime's start until CRI reports ready.
const readyTimeout = 30 * time.Second

// daemon is a container runtime process (containerd, crio) the harness
// started in a node network namespace.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
	// networkLater: the start waits for RuntimeReady only (the network's
	// CNI config comes later, from a pod).
	networkLater bool
}

// startDaemon starts argv inside the network namespace at netns and, when
// mnt is not nil, the mount namespace mnt (nsenter execs in place: the PID
// is the daemon's), with env added to the environment and its output
// appended to logPath, and waits until CRI on address reports the runtime
// and the network ready (the runtime only with networkLater).
func (d *daemon) startDaemon(t testing.TB, netns string, mnt *MountNS, logPath, address string, env []string, argv ...string) {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	nsenter := Nsenter(netns, mnt, argv...)
	cmd := exec.Command(nsenter[0], nsenter[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.cmd = cmd
	d.done = make(chan struct{})
	go func() { cmd.Wait(); close(d.done) }()

	err = Eventually(readyTimeout, 100*time.Millisecond, func() error {
		if !d.Running() {
			return fmt.Errorf("%s exited: %v", argv[0], cmd.ProcessState)
		}
		cri, err := DialCRI(address)
		if err != nil {
			return err
		}
		defer cri.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if d.networkLater {
			return cri.RuntimeReady(ctx)
		}
		return cri.Ready(ctx)
	})
	if err != nil {
		t.Fatalf("%s not ready: %v\n%s", argv[0], err, tailFile(logPath, 40))
	}
}

// PID is the runtime process's ID (0 before it started).
func (d *daemon) PID() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Running reports whether the runtime process is alive.
func (d *daemon) Running() bool {
	if d.done == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// terminate sends the runtime SIGTERM and waits up to wait for it to exit;
// it reports whether it did (true as well when it was not running).
func (d *daemon) terminate(wait time.Duration) bool {
	if !d.Running() {
		return true
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return true
	case <-time.After(wait):
		return false
	}
}

// waitGone waits until none of pids is alive (after SIGKILL).
func waitGone(pids []int) error {
	return Eventually(10*time.Second, 50*time.Millisecond, func() error {
		for _, pid := range pids {
			if Alive(pid) {
				return fmt.Errorf("pid %d still alive after SIGKILL", pid)
			}
		}
		return nil
	})
}

// removeAllPods stops and removes every pod sandbox of the runtime at address
// through CRI (so CNI DEL runs) and returns their IDs. Errors are logged: it
// runs at cleanup.
func removeAllPods(t testing.TB, address string) []string {
	cri, err := DialCRI(address)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return nil
	}
	defer cri.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pods, err := cri.ListPods(ctx)
	if err != nil {
		t.Logf("cleanup: list pods: %v", err)
		return nil
	}
	var ids []string
	for _, p := range pods {
		ids = append(ids, p.Id)
		if err := cri.DeletePod(ctx, p.Id); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
	return ids
}

// tailFile returns the last n lines of a file, for failure messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
