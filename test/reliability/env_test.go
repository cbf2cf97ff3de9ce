//go:build reliability

package reliability

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
	"golang.org/x/sys/unix"
)

// requireRoot skips (in strict mode fails, harness.Missing) a test that
// needs mounts or network namespaces.
func requireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		harness.Missing(t, "needs root (%s); run the suite as root", why)
	}
}

// mountTmpfs mounts a tmpfs of the given size on a fresh directory and
// unmounts it at cleanup (lazily, so a stuck file cannot leak the mount).
func mountTmpfs(t testing.TB, sizeBytes int) string {
	t.Helper()
	requireRoot(t, "tmpfs mount")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", sizeBytes)); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount tmpfs %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a filler file in dir until the filesystem is full and
// returns its path; removing the file frees the space again.
func fillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create filler: %v", err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i := 0; i < 1<<20; i++ {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	// Take the last partial blocks too.
	one := []byte{0}
	for i := 0; i < 4096; i++ {
		if _, err := f.Write(one); err != nil {
			break
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	if st.Bavail != 0 {
		t.Fatalf("filesystem %s not full after filling: %d blocks available", dir, st.Bavail)
	}
	return path
}

// bindReadOnly makes dir read-only by bind-mounting it onto itself and
// remounting the bind read-only (root ignores permission bits, so chmod is
// not enough). Cleanup unmounts it.
func bindReadOnly(t testing.TB, dir string) {
	t.Helper()
	requireRoot(t, "read-only bind mount")
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); err == nil {
		t.Fatalf("%s still writable after read-only remount", dir)
	}
}

// holdFlock takes an exclusive flock on path from the test process, the way a
// hung plugin or tool would hold it, and releases it at cleanup or when the
// returned function is called.
func holdFlock(t testing.TB, path string) (release func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("flock %s: %v", path, err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}
	t.Cleanup(release)
	return release
}

// fileState is what the suites compare to prove a file was left untouched.
type fileState struct {
	Exists bool
	Size   int64
	Inode  uint64
	SHA256 string
	Mode   os.FileMode
}

func (s fileState) String() string {
	if !s.Exists {
		return "absent"
	}
	return fmt.Sprintf("size=%d inode=%d mode=%v sha256=%s", s.Size, s.Inode, s.Mode, s.SHA256[:16])
}

func statFile(t testing.TB, path string) fileState {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return fileState{}
	}
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	s := fileState{Exists: true, Size: st.Size(), Mode: st.Mode()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.Inode = sys.Ino
	}
	if st.Mode().IsRegular() {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			t.Fatalf("hash %s: %v", path, err)
		}
		s.SHA256 = hex.EncodeToString(h.Sum(nil))
	} else {
		s.SHA256 = "not-a-regular-file"
	}
	return s
}

// netnsPool is a set of real network namespaces standing for live pod
// sandboxes. They are removed at cleanup.
type netnsPool struct {
	paths []string
}

func newNetnsPool(t testing.TB, n int) *netnsPool {
	t.Helper()
	requireRoot(t, "network namespaces for live sandboxes")
	p := &netnsPool{}
	for i := 0; i < n; i++ {
		p.paths = append(p.paths, harness.NewNetns(t, "live").Path)
	}
	return p
}

// Path returns the i-th namespace path (wrapping).
func (p *netnsPool) Path(i int) string { return p.paths[i%len(p.paths)] }

// goneNetns is the path of a sandbox whose namespace no longer exists.
func goneNetns(t testing.TB) string {
	return filepath.Join(t.TempDir(), "netns-gone")
}
