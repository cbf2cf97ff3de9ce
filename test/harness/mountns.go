package harness

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// MountNS is a mount namespace of its own for one simulated node, held open
// by a process the harness started. The node's daemons (containerd, the
// kubelet, checkpointd) join it, as they share one on a real node: the
// kubelet's pod volume mounts are seen by the runtime, and paths that every
// kubelet hard-codes (/var/lib/kubelet/device-plugins) are bind-mounted to the
// node's own directories, so two kubelets on one machine do not clash.
// Mounts of the host propagate into it (slave); its own stay inside.
type MountNS struct {
	// Path is the namespace (/proc/<holder pid>/ns/mnt), for nsenter --mount.
	Path string
	cmd  *exec.Cmd
	done chan struct{}
}

// NewMountNS creates the namespace and bind-mounts in it each source
// directory on its target (map target → source; a missing target directory
// is created on the host, empty). Cleanup kills the holder by PID; the
// namespace and its mounts go with the last process in it, so register the
// cleanup of the daemons that join it after this call.
func NewMountNS(t testing.TB, binds map[string]string) *MountNS {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: mount namespace: %v", err)
	}
	m := &MountNS{Path: fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid), cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(m.done) }()
	t.Cleanup(m.stop)
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	// unshare switches namespaces before it execs sleep.
	err = Eventually(10*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-m.done:
			return fmt.Errorf("unshare exited: %v", cmd.ProcessState)
		default:
		}
		if ns, err := os.Readlink(m.Path); err != nil || ns == own {
			return fmt.Errorf("pid %d still in the host's mount namespace (%v)", cmd.Process.Pid, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("harness: mount namespace: %v", err)
	}
	for target, source := range binds {
		if err := os.MkdirAll(source, 0o755); err != nil {
			t.Fatal(err)
		}
		m.Bind(t, target, source)
	}
	return m
}

// Bind bind-mounts source (a directory, a file or a socket) on target inside
// the namespace, for the node's daemons and the containers they start. A
// missing target (a directory, or an empty file when source is not a
// directory) is created from inside the namespace: below a target bound
// earlier it lands in that bound directory; elsewhere on the host's file
// system, empty.
func (m *MountNS) Bind(t testing.TB, target, source string) {
	t.Helper()
	fi, err := os.Stat(source)
	if err != nil {
		t.Fatalf("harness: bind %s: %v", target, err)
	}
	mk := `mkdir -p "$1"`
	if !fi.IsDir() {
		mk = `mkdir -p "$(dirname "$1")" && { [ -e "$1" ] || : > "$1"; }`
	}
	if _, err := Run(nil, "nsenter", "--mount="+m.Path, "sh", "-c", mk+` && mount --bind "$2" "$1"`, "bind", target, source); err != nil {
		t.Fatalf("harness: mount namespace: bind %s on %s: %v", source, target, err)
	}
}

func (m *MountNS) stop() {
	_ = m.cmd.Process.Kill()
	<-m.done
}

// nsenterArgs are the nsenter options that run a command in the network
// namespace at netns and, when mnt is not nil, in mnt; nsenter execs in place,
// so the PID is the command's own.
func nsenterArgs(netns string, mnt *MountNS) []string {
	args := []string{"--net=" + netns}
	if mnt != nil {
		args = append(args, "--mount="+mnt.Path)
	}
	return args
}

// Nsenter returns the command line that runs argv in the network namespace
// at netns and, when mnt is not nil, in mnt.
func Nsenter(netns string, mnt *MountNS, argv ...string) []string {
	return append(append([]string{"nsenter"}, nsenterArgs(netns, mnt)...), append([]string{"--"}, argv...)...)
}
