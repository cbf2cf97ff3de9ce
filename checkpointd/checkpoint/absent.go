package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// AbsentSuffix is the file name suffix of parent-absence marks.
const AbsentSuffix = ".absent"

func (s *Store) absentPath(id ID) string {
	return filepath.Join(s.dir, id.Key()+AbsentSuffix)
}

// MarkAbsent records that the API server reported id's parent gone since
// since. An earlier mark is kept. The mark survives restarts, so a pod the
// API server said was deleted (or bound elsewhere) is not restored by a
// later outage, even after a reboot.
func (s *Store) MarkAbsent(id ID, since time.Time) error {
	if err := id.valid(); err != nil {
		return err
	}
	if _, ok := s.AbsentSince(id); ok {
		return nil
	}
	return safefile.Write(s.absentPath(id), []byte(since.UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
}

// AbsentSince returns the time of id's absence mark, if any. An unreadable
// mark counts as none (the parent is then "unknown": nothing is deleted).
func (s *Store) AbsentSince(id ID) (time.Time, bool) {
	if id.valid() != nil {
		return time.Time{}, false
	}
	data, err := os.ReadFile(s.absentPath(id))
	if err != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// ClearAbsent removes id's absence mark (the parent is back, or released).
func (s *Store) ClearAbsent(id ID) error {
	if errors.Is(id.CheckLen(), ErrIDTooLong) {
		return nil // no file of that name can exist
	}
	if err := id.valid(); err != nil {
		return err
	}
	err := os.Remove(s.absentPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return safefile.SyncDir(s.dir)
}
