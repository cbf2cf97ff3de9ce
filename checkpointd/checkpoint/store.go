package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// CorruptDir is the sub-directory where records that fail verification are moved.
const CorruptDir = "corrupt"

// Store is a directory of checkpoint records.
type Store struct {
	dir string
	now func() time.Time
}

// New returns a store in dir, creating it (mode 0700) if needed.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint dir: %w", err)
	}
	// Records may hold secret data: only root may read the directory.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict checkpoint dir: %w", err)
	}
	return &Store{dir: dir, now: time.Now}, nil
}

// WithClock makes the store stamp saves and quarantined files with now
// instead of the wall clock (the reconciler passes its own clock, so that
// retention is measured on one clock).
func (s *Store) WithClock(now func() time.Time) *Store {
	s.now = now
	return s
}

// Open returns the store in dir without creating anything (for removing it).
func Open(dir string) *Store { return &Store{dir: dir, now: time.Now} }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the record file path of id.
func (s *Store) Path(id ID) string { return filepath.Join(s.dir, id.fileName()) }

// Save writes rec unless a valid record with the same content is already
// stored. It reports whether the file was written. SavedAt is set by Save.
func (s *Store) Save(rec *Record) (bool, error) {
	id := rec.ID()
	if err := id.valid(); err != nil {
		return false, err
	}
	old, err := s.Load(id)
	switch {
	case err == nil:
		if sameContent(old, rec) {
			rec.SavedAt = old.SavedAt
			return false, nil
		}
	case errors.Is(err, ErrNotFound):
	case errors.Is(err, ErrCorrupt):
		// Keep the evidence, then write the fresh record.
		if _, qerr := s.Quarantine(id); qerr != nil {
			return false, qerr
		}
	default:
		return false, err
	}
	rec.SavedAt = s.now().UTC().Truncate(time.Second)
	payload, err := json.Marshal(rec)
	if err != nil {
		return false, fmt.Errorf("encode checkpoint %s: %w", id, err)
	}
	if err := safefile.Write(s.Path(id), safefile.Frame(Format, payload), 0o600); err != nil {
		return false, fmt.Errorf("write checkpoint %s: %w", id, err)
	}
	return true, nil
}

// Load reads and verifies the record of id. It returns an error wrapping
// ErrNotFound or ErrCorrupt when there is no usable record.
func (s *Store) Load(id ID) (*Record, error) {
	if err := id.valid(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(s.Path(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	rec, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path(id), err)
	}
	if got := rec.ID(); got != id {
		return nil, fmt.Errorf("%s: holds pod %s: %w", s.Path(id), got, ErrCorrupt)
	}
	return rec, nil
}

// Corrupt describes a record file that failed verification and where it was moved.
type Corrupt struct {
	Path    string // original path
	MovedTo string // path inside corrupt/, empty if the move failed
	Err     error  // why it is corrupt (and, if the move failed, why)
}

// List returns every valid record, sorted by identity. Files that fail
// verification are moved into corrupt/ and returned as Corrupt entries;
// they are never deleted. Leftover temporary files of interrupted writes
// are removed.
func (s *Store) List() ([]*Record, []Corrupt, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var recs []*Record
	var bad []Corrupt
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		if strings.HasPrefix(name, ".") && strings.Contains(name, Suffix+".") {
			// Temporary file of a write that never reached its rename.
			_ = os.Remove(filepath.Join(s.dir, name))
			continue
		}
		if !strings.HasSuffix(name, Suffix) || strings.HasPrefix(name, ".") {
			continue
		}
		id, ok := SplitKey(strings.TrimSuffix(name, Suffix))
		if !ok || id.valid() != nil {
			continue
		}
		rec, err := s.Load(id)
		switch {
		case err == nil:
			recs = append(recs, rec)
		case errors.Is(err, ErrCorrupt):
			moved, qerr := s.Quarantine(id)
			c := Corrupt{Path: s.Path(id), MovedTo: moved, Err: err}
			if qerr != nil {
				c.Err = fmt.Errorf("%w; and could not set it aside: %v", err, qerr)
			}
			bad = append(bad, c)
		case errors.Is(err, ErrNotFound):
			// Removed between ReadDir and Load.
		default:
			return nil, nil, err
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID().String() < recs[j].ID().String() })
	return recs, bad, nil
}

// Records returns every valid record, sorted by identity, and changes
// nothing: a file that fails verification is skipped (List sets it aside
// and reports it).
func (s *Store) Records() ([]*Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var recs []*Record
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, Suffix) {
			continue
		}
		if id, ok := SplitKey(strings.TrimSuffix(name, Suffix)); ok && id.valid() == nil {
			if rec, err := s.Load(id); err == nil {
				recs = append(recs, rec)
			}
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID().String() < recs[j].ID().String() })
	return recs, nil
}

// Quarantine moves the record file of id into corrupt/ and returns its new path.
func (s *Store) Quarantine(id ID) (string, error) {
	cdir := filepath.Join(s.dir, CorruptDir)
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", cdir, err)
	}
	dst := filepath.Join(cdir, id.fileName()+"."+strconv.FormatInt(s.now().UnixNano(), 10))
	if err := os.Rename(s.Path(id), dst); err != nil {
		return "", fmt.Errorf("set aside corrupt checkpoint: %w", err)
	}
	if err := safefile.SyncDir(cdir); err != nil {
		return dst, err
	}
	return dst, safefile.SyncDir(s.dir)
}

// Remove deletes the record of id. Removing a missing record is not an error.
func (s *Store) Remove(id ID) error {
	if err := id.valid(); err != nil {
		return err
	}
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	return safefile.SyncDir(s.dir)
}
