package boltstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// MarkFile is the creation mark: written once the data directory has a
// database (after the new database's rename, or by the first write of a
// store created before marks existed), and never removed by stickyip. A
// missing database beside it is a lost store (reservation.ErrLost), not a
// node that never had one: running sandboxes may hold addresses that an
// empty store would hand out again.
const MarkFile = "stickyip.created"

// markPath returns the creation mark's path.
func (s *Store) markPath() string { return filepath.Join(s.dir, MarkFile) }

// marked reports whether the data directory carries the creation mark.
func (s *Store) marked() (bool, error) {
	_, err := os.Lstat(s.markPath())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("%w: %v", reservation.ErrIO, err)
}

// lostError is the error of every call on a lost store.
func (s *Store) lostError() error {
	since := ""
	if data, err := os.ReadFile(s.markPath()); err == nil {
		since = " (" + strings.TrimSpace(contract.Clip(string(data), 100)) + ")"
	}
	return fmt.Errorf("%w: %s is missing, but %s says this node had a store%s: the addresses its running pods hold are unknown, "+
		"so no address is handed out until the store is rebuilt", reservation.ErrLost, s.Path(), s.markPath(), since)
}

// mark writes the creation mark when it is missing (atomically: a
// temporary file renamed into place, the directory synced). The caller
// holds the exclusive lock and the database exists.
func (s *Store) mark(now time.Time) error {
	if ok, err := s.marked(); err != nil || ok {
		return err
	}
	tmp := s.markPath() + ".new"
	body := "created " + now.UTC().Format(time.RFC3339) + " by stickyip " + contract.Version + "\n"
	err := writeSynced(tmp, []byte(body))
	if err == nil {
		err = os.Rename(tmp, s.markPath())
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: writing %s: %v", reservation.ErrIO, s.markPath(), err)
	}
	return nil
}

// writeSynced writes data to a new file at path and syncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
