package boltstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenFile: openFile opens as os.OpenFile does (the file, its name,
// close-on-exec, the same error), with a descriptor left blocking, which the
// runtime's poller never takes.
func TestOpenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkPlainDescriptor(t, f, path)

	missing := filepath.Join(t.TempDir(), "no", "f")
	_, err = openFile(missing, os.O_RDWR|os.O_CREATE, 0o600)
	_, want := os.OpenFile(missing, os.O_RDWR|os.O_CREATE, 0o600)
	var perr *fs.PathError
	if !errors.As(err, &perr) || !errors.Is(err, fs.ErrNotExist) || err.Error() != want.Error() {
		t.Fatalf("error %#v, want os.OpenFile's %#v", err, want)
	}
}

// checkPlainDescriptor fails t unless f is named path, is close-on-exec and
// blocking.
func checkPlainDescriptor(t *testing.T, f *os.File, path string) {
	t.Helper()
	if f.Name() != path {
		t.Errorf("name %q, want %q", f.Name(), path)
	}
	fd := int(f.Fd())
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x (%v): not close-on-exec", fl, err)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("file status flags %#x (%v): non-blocking", fl, err)
	}
}
