package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Host mount points are paths every node binds its own directory or file
// on (/run/flannel, /opt/cni/bin, ...): they must exist on the machine, and
// tests create the missing ones. Removing one is not harmless while another
// test uses it: rmdir or unlink of a path that is a mount point in another
// mount namespace succeeds and the kernel detaches the mounts on it there
// (Linux 3.18 and later). A cluster test that ended removed /run/flannel
// under another test's nodes, running at the same time in another process,
// and their flannel lease was gone (TestCluster's workloads step, pods
// without a network). So the paths are reference-counted across processes:
// each user holds a shared flock on hostPathUsers until its cleanup, and the
// last one, the only one that gets the exclusive lock, removes what the
// tests created (listed in hostPathMade), every step under hostPathMutex.
var (
	hostPathDir   = filepath.Join(os.TempDir(), "stickyip-e2e-hostpaths")
	hostPathMutex = filepath.Join(hostPathDir, "mutex")
	hostPathUsers = filepath.Join(hostPathDir, "users")
	hostPathMade  = filepath.Join(hostPathDir, "made")
)

// hostPathUse is this process's hold on the host paths: one shared lock,
// taken by the first test that needs a host path and released by its
// cleanup (tests of one process run one after another).
var hostPathUse struct {
	sync.Mutex
	f *os.File
}

// HostMountPoint makes sure path exists on the machine as a mount point:
// its missing directories are created, and with file an empty file as the
// last element. What the tests created is removed, if still empty, when the
// last test using host mount points, in any process, ends.
func HostMountPoint(t testing.TB, path string, file bool) {
	t.Helper()
	err := withHostPathMutex(func() error {
		if err := holdHostPaths(t); err != nil {
			return err
		}
		var made []string
		for p := path; ; p = filepath.Dir(p) {
			if _, err := os.Lstat(p); err == nil {
				break
			}
			made = append(made, p)
		}
		slices.Reverse(made)
		for i, p := range made {
			var err error
			if file && i == len(made)-1 {
				err = os.WriteFile(p, nil, 0o600)
			} else {
				err = os.Mkdir(p, 0o755)
			}
			if err != nil {
				return err
			}
			if err := appendLine(hostPathMade, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("harness: host mount point %s: %v", path, err)
	}
}

// holdHostPaths takes this process's shared lock once, released by the
// cleanup of t (the test that took it).
func holdHostPaths(t testing.TB) error {
	hostPathUse.Lock()
	defer hostPathUse.Unlock()
	if hostPathUse.f != nil {
		return nil
	}
	f, err := os.OpenFile(hostPathUsers, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return err
	}
	hostPathUse.f = f
	t.Cleanup(func() {
		if err := releaseHostPaths(); err != nil {
			t.Errorf("harness: host mount points: %v", err)
		}
	})
	return nil
}

// releaseHostPaths drops this process's hold and, when no process holds
// one, removes what the tests created (deepest first; a directory not
// empty, or a file someone wrote to, stays).
func releaseHostPaths() error {
	return withHostPathMutex(func() error {
		hostPathUse.Lock()
		f := hostPathUse.f
		hostPathUse.f = nil
		hostPathUse.Unlock()
		if f != nil {
			f.Close()
		}
		u, err := os.OpenFile(hostPathUsers, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		defer u.Close()
		if err := syscall.Flock(int(u.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.EWOULDBLOCK) {
			return nil // another test still uses them
		} else if err != nil {
			return err
		}
		made, err := readLines(hostPathMade)
		if err != nil {
			return err
		}
		for i := len(made) - 1; i >= 0; i-- {
			p := made[i]
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
				continue
			}
			_ = os.Remove(p) // a directory not empty stays
		}
		return os.Remove(hostPathMade)
	})
}

// withHostPathMutex runs f holding the machine-wide exclusive lock.
func withHostPathMutex(f func() error) error {
	if err := os.MkdirAll(hostPathDir, 0o700); err != nil {
		return err
	}
	m, err := os.OpenFile(hostPathMutex, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := syscall.Flock(int(m.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", hostPathMutex, err)
	}
	return f()
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, werr := fmt.Fprintln(f, line)
	return errors.Join(werr, f.Close())
}

// readLines returns the non-empty lines of the file at path, none when it
// does not exist.
func readLines(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}
