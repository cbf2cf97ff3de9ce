package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
		if !errors.Is(err, reservation.ErrLocked) {
			_ = f.Close()
		} // on timeout the waiting goroutine owns f and closes it
		return nil, err
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

func flockTimeout(f *os.File, how int, timeout time.Duration) error {
	fd := int(f.Fd())
	if err := unix.Flock(fd, how|unix.LOCK_NB); err == nil {
		return nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w: locking %s: %v", reservation.ErrIO, f.Name(), err)
	}
	var (
		mu        sync.Mutex
		abandoned bool
	)
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			err = unix.Flock(fd, how)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if abandoned {
			// The caller gave up and closed nothing; drop what we got late.
			if err == nil {
				_ = unix.Flock(fd, unix.LOCK_UN)
			}
			_ = f.Close()
			return
		}
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: locking %s: %v", reservation.ErrIO, f.Name(), err)
		}
		return nil
	case <-timer.C:
		mu.Lock()
		defer mu.Unlock()
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
		default:
		}
		abandoned = true
		return fmt.Errorf("%w: waited %s for %s", reservation.ErrLocked, timeout, f.Name())
	}
}
