package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
)

// dirLock is a held flock on <dataDir>/stickyip.lock.
type dirLock struct {
	f *os.File
}

func (l *dirLock) release() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}

// lock takes the data directory's lock, shared for readers and exclusive for
// writers, waiting in the kernel's queue (no polling) for at most lockTimeout.
func (s *Store) lock(shared bool) (*dirLock, error) {
	s.uses.Add(1)
	path := filepath.Join(s.dir, LockFile)
	f, err := openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrNotExist) && !shared {
		if mkErr := os.MkdirAll(s.dir, 0o755); mkErr != nil {
			return nil, fmt.Errorf("%w: creating data directory: %v", reservation.ErrIO, mkErr)
		}
		f, err = openFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil && shared {
		// A reader may work on a read-only directory or before anything exists.
		if f2, err2 := openFile(path, os.O_RDONLY, 0); err2 == nil {
			f, err = f2, nil
		} else if errors.Is(err2, os.ErrNotExist) {
			return s.lockDirOnly()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: opening lock file: %v", reservation.ErrIO, err)
	}
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	if err := flockTimeout(f, how, s.lockTimeout); err != nil {
		return nil, err // f is closed, or will be once the kernel answers
	}
	return &dirLock{f: f}, nil
}

// lockDirOnly is used by readers when there is no lock file (nothing stored
// yet, or an unwritable directory): they lock nothing and read what is there.
func (s *Store) lockDirOnly() (*dirLock, error) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	return &dirLock{f: f}, nil
}

// flock is unix.Flock (a test makes the call fail).
var flock = unix.Flock

// flockTimeout takes the lock how on f, waiting at most timeout. On an
// error f is closed: at once, or, when the call still waits in the kernel,
// by the goroutine that waits for it (which drops a lock it gets late).
func flockTimeout(f *os.File, how int, timeout time.Duration) error {
	fd := int(f.Fd())
	if err := flock(fd, how|unix.LOCK_NB); err == nil {
		return nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		_ = f.Close()
		return fmt.Errorf("%w: locking %s: %v", reservation.ErrIO, f.Name(), err)
	}
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = flock(fd, how); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	return awaitFlock(f, done, timer.C, timeout)
}

// awaitFlock waits for the blocking lock call's result on done (sent once)
// or for expired. A result already there when the timer fires counts: a
// lock got just then is taken, and a call that failed is an I/O error, not
// "locked". On an error f is closed; on a timeout with the call still
// waiting, a goroutine takes over f and closes it once the call returns.
func awaitFlock(f *os.File, done <-chan error, expired <-chan time.Time, timeout time.Duration) error {
	var err error
	select {
	case err = <-done:
	case <-expired:
		select {
		case err = <-done:
		default:
			go func() {
				if <-done == nil {
					_ = flock(int(f.Fd()), unix.LOCK_UN)
				}
				_ = f.Close()
			}()
			return fmt.Errorf("%w: waited %s for %s", reservation.ErrLocked, timeout, f.Name())
		}
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("%w: locking %s: %v", reservation.ErrIO, f.Name(), err)
	}
	return nil
}
