package harness

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A host mount point created by one test stays while another user (here a
// second lock holder, as another e2e process would be) still holds the
// host paths, and goes with the last user: removing it under a running
// cluster detached its nodes' binds (TestCluster lost /run/flannel when
// TestClusterInstall ended in another process).
func TestHostMountPointRemovedByTheLastUser(t *testing.T) {
	base := t.TempDir()
	// A registry of its own: the machine's is shared with every e2e process
	// running (another's cluster holds it, and the last user would never be
	// this test).
	saved := [...]string{hostPathDir, hostPathMutex, hostPathUsers, hostPathMade}
	hostPathDir = filepath.Join(base, "registry")
	hostPathMutex, hostPathUsers, hostPathMade = filepath.Join(hostPathDir, "mutex"), filepath.Join(hostPathDir, "users"), filepath.Join(hostPathDir, "made")
	t.Cleanup(func() {
		hostPathDir, hostPathMutex, hostPathUsers, hostPathMade = saved[0], saved[1], saved[2], saved[3]
	})
	dir := filepath.Join(base, "run", "flannel")
	file := filepath.Join(base, "run", "xtables.lock")

	if err := os.MkdirAll(hostPathDir, 0o700); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(hostPathUsers, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_SH); err != nil {
		t.Fatal(err)
	}

	t.Run("first user", func(t *testing.T) {
		HostMountPoint(t, dir, false)
		HostMountPoint(t, file, true)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("%s: %v, want a directory", dir, err)
		}
		if fi, err := os.Stat(file); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %v, want a file", file, err)
		}
	})
	for _, p := range []string{dir, file} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s removed while another user holds the host paths: %v", p, err)
		}
	}

	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	t.Run("last user", func(t *testing.T) {
		HostMountPoint(t, dir, false) // exists: nothing made, the hold taken
	})
	for _, p := range []string{dir, file, filepath.Join(base, "run")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after the last user: %v, want it removed", p, err)
		}
	}
}
