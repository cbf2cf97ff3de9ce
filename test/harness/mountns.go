package harness

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
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
	// Reboot changes it.
	Path string
	cmd  *exec.Cmd
	done chan struct{}
	// binds are the bind mounts made so far, in order (one per target: a
	// target bound again keeps its place with the new source), which Reboot
	// makes again.
	binds []bindMount
}

// bindMount is one bind of source on target.
type bindMount struct {
	target, source string
	dir            bool // source is a directory
}

// NewMountNS creates the namespace and bind-mounts in it each source
// directory on its target (map target → source; a missing target directory
// is created on the host, empty). Cleanup kills the holder by PID; the
// namespace and its mounts go with the last process in it, so register the
// cleanup of the daemons that join it after this call.
func NewMountNS(t testing.TB, binds map[string]string) *MountNS {
	t.Helper()
	m := &MountNS{}
	m.hold(t)
	t.Cleanup(m.stop)
	for target, source := range binds {
		if err := os.MkdirAll(source, 0o755); err != nil {
			t.Fatal(err)
		}
		m.Bind(t, target, source)
	}
	return m
}

// hold starts the process that holds a new namespace, a copy of the
// host's mount table as it is now, and points Path at it.
func (m *MountNS) hold(t testing.TB) {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "sleep", "infinity")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("harness: mount namespace: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.Path, m.cmd, m.done = fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid), cmd, done
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	// unshare switches namespaces before it execs sleep.
	err = Eventually(10*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-done:
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
}

// Reboot gives the node a fresh mount table, as a reboot does: the holder
// of the namespace is killed (by PID), so every mount made inside it goes
// (pod netns and rootfs mounts, volume mounts, binds) with the namespace,
// and a new namespace, a copy of the host's mount table as it is now (a
// tmpfs the power cut replaced on the host is the new one there too), gets
// the binds of NewMountNS and Bind again, in their order, as a node's boot
// mounts its fstab. A directory source that is gone (it was on a tmpfs the
// power cut emptied) is made again, empty; a bind whose file or socket source
// is gone is left out (bind it again once its owner has made it). Every
// process of the node must have stopped: one left behind keeps the old
// namespace, with its mounts, to itself.
func (m *MountNS) Reboot(t testing.TB) {
	t.Helper()
	m.stop()
	m.hold(t)
	for _, b := range m.binds {
		if b.dir {
			if err := os.MkdirAll(b.source, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if _, err := os.Stat(b.source); err != nil {
			t.Logf("harness: mount namespace after the reboot: %s not bound on %s: %v", b.source, b.target, err)
			continue
		}
		m.bind(t, b)
	}
}

// UnmountUnder lazily unmounts, inside the namespace, every mount below dir
// (dir included), deepest first: a daemon's state mounts that a crash
// leaves behind there.
func (m *MountNS) UnmountUnder(dir string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", m.cmd.Process.Pid))
	if err != nil {
		return err
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mps = append(mps, f[4])
		}
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	for _, mp := range mps {
		if _, err := Run(nil, "nsenter", "--mount="+m.Path, "umount", "-l", mp); err != nil {
			return fmt.Errorf("mount namespace: %w", err)
		}
	}
	return nil
}

// Bind bind-mounts source (a directory, a file or a socket) on target inside
// the namespace, for the node's daemons and the containers they start; a
// target bound before is unbound first. A
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
	b := bindMount{target: target, source: source, dir: fi.IsDir()}
	for i := range m.binds {
		if m.binds[i].target == target {
			// Replaced, not stacked: nothing can be mounted on a bind of a
			// file that was removed since (a daemon's socket made again).
			if _, err := Run(nil, "nsenter", "--mount="+m.Path, "umount", "-l", target); err != nil {
				t.Fatalf("harness: mount namespace: unbind %s: %v", target, err)
			}
			m.bind(t, b)
			m.binds[i] = b
			return
		}
	}
	m.bind(t, b)
	m.binds = append(m.binds, b)
}

// Bound reports whether Bind bound something on target.
func (m *MountNS) Bound(target string) bool {
	for _, b := range m.binds {
		if b.target == target {
			return true
		}
	}
	return false
}

func (m *MountNS) bind(t testing.TB, b bindMount) {
	t.Helper()
	mk := `mkdir -p "$1"`
	if !b.dir {
		mk = `mkdir -p "$(dirname "$1")" && { [ -e "$1" ] || : > "$1"; }`
	}
	if _, err := Run(nil, "nsenter", "--mount="+m.Path, "sh", "-c", mk+` && mount --bind "$2" "$1"`, "bind", b.target, b.source); err != nil {
		t.Fatalf("harness: mount namespace: bind %s on %s: %v", b.source, b.target, err)
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
