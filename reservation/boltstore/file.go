package boltstore

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// openFile opens name as os.OpenFile does (close-on-exec, an error naming
// the path), as a blocking descriptor the runtime's poller never sees.
// os.OpenFile makes every file non-blocking and offers it to epoll, which
// refuses regular files: four system calls a file for nothing, and the
// first such file of a process sets the poller up (three more). Every CNI
// call is a new process that opens the lock file and the database.
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		switch err {
		case nil:
			return os.NewFile(uintptr(fd), name), nil
		case unix.EINTR:
			continue
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
}

// syncDir syncs the directory dir, so that a rename into it lasts.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return fsync(d)
}

// fsync is (*os.File).Sync (a test sees what is synced, in which order,
// and makes a sync fail).
var fsync = (*os.File).Sync
