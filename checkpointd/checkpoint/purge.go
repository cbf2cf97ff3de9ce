package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// PruneCorrupt deletes the files set aside in corrupt/ more than retention
// before now (the time is the one Quarantine put in the name) and returns
// how many it deleted.
func (s *Store) PruneCorrupt(retention time.Duration, now time.Time) (int, error) {
	cdir := filepath.Join(s.dir, CorruptDir)
	entries, err := os.ReadDir(cdir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		i := strings.LastIndexByte(name, '.')
		nanos, perr := strconv.ParseInt(name[i+1:], 10, 64)
		if i < 0 || perr != nil || !strings.Contains(name, Suffix+".") || !e.Type().IsRegular() {
			continue // not ours: leave it
		}
		if now.Sub(time.Unix(0, nanos)) < retention {
			continue
		}
		if err := os.Remove(filepath.Join(cdir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
	}
	if n > 0 {
		return n, safefile.SyncDir(cdir)
	}
	return n, nil
}

// Purge deletes everything the store keeps: records, absence marks,
// temporary files, files set aside as corrupt, and the other files named in
// extra (file names inside the directory). Files it does not know are left,
// and so is the directory when they remain. It returns what it deleted.
func (s *Store) Purge(extra ...string) ([]string, error) {
	var removed []string
	rm := func(p string) error {
		err := os.Remove(p)
		if err == nil {
			removed = append(removed, p)
			return nil
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	ours := func(name string) bool {
		return strings.HasSuffix(name, Suffix) || strings.HasSuffix(name, AbsentSuffix) ||
			(strings.HasPrefix(name, ".") && (strings.Contains(name, Suffix+".") || strings.Contains(name, AbsentSuffix+"."))) ||
			slices.Contains(extra, name) || slices.ContainsFunc(extra, func(x string) bool { return strings.HasPrefix(name, "."+x+".") })
	}
	cdir := filepath.Join(s.dir, CorruptDir)
	if entries, err := os.ReadDir(cdir); err == nil {
		for _, e := range entries {
			if strings.Contains(e.Name(), Suffix+".") {
				if err := rm(filepath.Join(cdir, e.Name())); err != nil {
					return removed, err
				}
			}
		}
		_ = os.Remove(cdir) // only when empty
	}
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return removed, nil
	}
	if err != nil {
		return removed, err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && ours(e.Name()) {
			if err := rm(filepath.Join(s.dir, e.Name())); err != nil {
				return removed, err
			}
		}
	}
	_ = os.Remove(s.dir) // only when empty
	return removed, nil
}
