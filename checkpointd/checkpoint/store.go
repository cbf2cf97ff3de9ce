package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// CorruptDir is the sub-directory where records that fail verification are moved.
const CorruptDir = "corrupt"

// Store is a directory of checkpoint records. It keeps each record as it
// last read it, with the identity of its file (inode, size, times): a file
// unchanged since is not read and decoded again (every write replaces the
// file by a rename, and an edit changes its size or times). A reconcile
// pass lists every record; most never change.
type Store struct {
	dir string
	now func() time.Time

	mu   sync.Mutex
	read map[ID]readRecord
}

// readRecord is a record as read, and the file it was read from.
type readRecord struct {
	file fileID
	rec  *Record
}

// fileID tells a file's content apart from any other the path held.
type fileID struct {
	ino, size          uint64
	mtime, ctime, nsec int64
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true
}

// reads counts the records read and decoded from disk (Reads).
var reads atomic.Int64

// Reads returns how many records this process read and decoded from disk:
// what a test counts to see an unchanged record is not read again.
func Reads() int64 { return reads.Load() }

// New returns a store in dir, creating it (mode 0700) if needed.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint dir: %w", err)
	}
	// Records may hold secret data: only root may read the directory.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict checkpoint dir: %w", err)
	}
	return &Store{dir: dir, now: time.Now, read: map[ID]readRecord{}}, nil
}

// WithClock makes the store stamp saves and quarantined files with now
// instead of the wall clock (the reconciler passes its own clock, so that
// retention is measured on one clock).
func (s *Store) WithClock(now func() time.Time) *Store {
	s.now = now
	return s
}

// Open returns the store in dir without creating anything (for removing it).
func Open(dir string) *Store { return &Store{dir: dir, now: time.Now, read: map[ID]readRecord{}} }

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
	f, err := os.Open(s.Path(id))
	if errors.Is(err, os.ErrNotExist) {
		s.forget(id)
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	file, known := idOf(fi)
	s.mu.Lock()
	last, ok := s.read[id]
	s.mu.Unlock()
	if ok && known && last.file == file {
		return last.rec, nil
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", id, err)
	}
	reads.Add(1)
	s.forget(id)
	rec, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path(id), err)
	}
	if got := rec.ID(); got != id {
		return nil, fmt.Errorf("%s: holds pod %s: %w", s.Path(id), got, ErrCorrupt)
	}
	if known {
		s.mu.Lock()
		s.read[id] = readRecord{file: file, rec: rec}
		s.mu.Unlock()
	}
	return rec, nil
}

// loadListed is Load of a file the directory listed as e: when the file
// is the one last read (one stat), its record as read then.
func (s *Store) loadListed(id ID, e os.DirEntry) (*Record, error) {
	if fi, err := e.Info(); err == nil {
		if file, known := idOf(fi); known {
			s.mu.Lock()
			last, ok := s.read[id]
			s.mu.Unlock()
			if ok && last.file == file {
				return last.rec, nil
			}
		}
	}
	return s.Load(id)
}

// forget drops the record of id as last read.
func (s *Store) forget(id ID) {
	s.mu.Lock()
	delete(s.read, id)
	s.mu.Unlock()
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
		rec, err := s.loadListed(id, e)
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
	s.forget(id)
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
	s.forget(id)
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	return safefile.SyncDir(s.dir)
}
