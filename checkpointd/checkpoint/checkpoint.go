// Package checkpoint stores checkpointd's saved pods on local disk.
//
// Layout of the checkpoint directory (created 0700, root only: records may hold
// secret data):
//
//	<dir>/
//	├── <namespace>_<name>.ckpt     one record per pod identity
//	├── <namespace>_<name>.absent   since when the API server has said the parent is gone (RFC 3339)
//	├── .<namespace>_<name>.ckpt.*  temporary files of an interrupted write (ignored, swept)
//	└── corrupt/                     records that failed verification, set aside
//	    └── <namespace>_<name>.ckpt.<unix-nanos>
//
// A record file is one header line followed by the payload:
//
//	{"format":"stickyip.io/checkpoint/v1","length":1234,"sha256":"<hex>"}\n
//	<payload: JSON of Record, exactly length bytes>
//
// Writes are atomic: the file is written under a temporary name, fsynced,
// renamed over the final name, and the directory is fsynced, so a crash at
// any point leaves either the old or the new record. A record whose header,
// length or checksum does not match is never returned as valid: List reports
// it and moves it into corrupt/ (it is never deleted), so an operator can
// inspect it.
//
// Namespaces and pod names cannot contain '_', so the file name maps back to
// exactly one identity.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Format is the header value of every record file this package writes.
const Format = "stickyip.io/checkpoint/v1"

// Suffix is the file name suffix of record files.
const Suffix = ".ckpt"

// CorruptDir is the sub-directory where records that fail verification are moved.
const CorruptDir = "corrupt"

// ErrNotFound is returned by Load when no record exists for the identity.
var ErrNotFound = errors.New("checkpoint not found")

// ErrCorrupt is wrapped by errors about records that fail verification.
var ErrCorrupt = errors.New("checkpoint corrupt")

// ID is a pod identity: namespace and name.
type ID struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (id ID) String() string { return id.Namespace + "/" + id.Name }

// ParseID parses "namespace/name".
func ParseID(s string) (ID, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return ID{}, fmt.Errorf("invalid pod identity %q: want namespace/name", s)
	}
	return ID{Namespace: ns, Name: name}, nil
}

// Key returns "<namespace>_<name>", the form of id in every file and
// directory name checkpointd keeps ('_' is in neither part).
func (id ID) Key() string { return id.Namespace + "_" + id.Name }

// SplitKey splits Key's form; the caller validates the parts.
func SplitKey(s string) (ID, bool) {
	ns, name, ok := strings.Cut(s, "_")
	return ID{Namespace: ns, Name: name}, ok
}

// fileName returns the record file name of id.
func (id ID) fileName() string { return id.Key() + Suffix }

// File names of the static copies checkpointd writes in the kubelet's static
// pod directory: StaticPrefix + Key + StaticSuffix (a JSON manifest).
// Versions before JSON manifests wrote LegacyStaticSuffix (YAML); such a copy
// is still recognised as checkpointd's, kept while it is needed and removed
// like any other (never rewritten: the kubelet derives a static pod's UID
// from its file name, so a rename would restart the copy).
const (
	StaticPrefix       = "stickyip-checkpoint-"
	StaticSuffix       = ".json"
	LegacyStaticSuffix = ".yaml"
)

// StaticName returns the file name of id's static copy.
func (id ID) StaticName() string { return StaticPrefix + id.Key() + StaticSuffix }

// MaxIDLen bounds len(namespace)+len(name) of an identity checkpointd can
// keep: its longest file name, the static copy's
// "stickyip-checkpoint-<namespace>_<name>.json" (".yaml" before), must fit
// in the 255 bytes file systems allow. The API allows longer names (253 +
// 63); such pods are refused with ErrIDTooLong.
const MaxIDLen = 255 - len(StaticPrefix+"_"+StaticSuffix)

// ErrIDTooLong is wrapped by the error about an identity longer than MaxIDLen.
var ErrIDTooLong = errors.New("namespace and name too long for checkpointd's file names")

func (id ID) valid() error {
	for _, s := range []string{id.Namespace, id.Name} {
		if s == "" || strings.ContainsAny(s, "/_\x00") || s == "." || s == ".." {
			return fmt.Errorf("invalid pod identity %q", id.String())
		}
	}
	return id.CheckLen()
}

// CheckLen reports ErrIDTooLong for identities longer than MaxIDLen.
func (id ID) CheckLen() error {
	if n := len(id.Namespace) + len(id.Name); n > MaxIDLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrIDTooLong, n, MaxIDLen)
	}
	return nil
}

// Record is what checkpointd saves for one opted-in pod: the pod as the API
// server had it (status and server-managed metadata stripped) and the data of
// the secrets and configMaps its restored copy needs.
type Record struct {
	// Pod is the parent pod.
	Pod *corev1.Pod `json:"pod"`
	// Secrets holds the data of secrets referenced by the pod's volumes, by secret name.
	Secrets map[string]map[string][]byte `json:"secrets,omitempty"`
	// ConfigMaps holds the data of configMaps referenced by the pod's volumes and env,
	// by configMap name (binaryData is folded into the byte map).
	ConfigMaps map[string]map[string][]byte `json:"configMaps,omitempty"`
	// SavedAt is when this content was first written.
	SavedAt time.Time `json:"savedAt"`
}

// ID returns the identity the record belongs to.
func (r *Record) ID() ID {
	if r.Pod == nil {
		return ID{}
	}
	return ID{Namespace: r.Pod.Namespace, Name: r.Pod.Name}
}

type header struct {
	Format string `json:"format"`
	Length int    `json:"length"`
	SHA256 string `json:"sha256"`
}

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
	if err := WriteFileAtomic(s.Path(id), Frame(Format, payload), 0o600); err != nil {
		return false, fmt.Errorf("write checkpoint %s: %w", id, err)
	}
	return true, nil
}

// Frame returns payload behind a header line naming its format, length and
// SHA-256, the layout of every file checkpointd must be able to trust later.
func Frame(format string, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	h, _ := json.Marshal(header{Format: format, Length: len(payload), SHA256: hex.EncodeToString(sum[:])})
	var buf bytes.Buffer
	buf.Grow(len(h) + 1 + len(payload))
	buf.Write(h)
	buf.WriteByte('\n')
	buf.Write(payload)
	return buf.Bytes()
}

// Unframe verifies data written by Frame with the same format and returns
// its payload; anything else is an error wrapping ErrCorrupt.
func Unframe(format string, data []byte) ([]byte, error) {
	line, payload, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, fmt.Errorf("no header line: %w", ErrCorrupt)
	}
	var h header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("bad header: %v: %w", err, ErrCorrupt)
	}
	if h.Format != format {
		return nil, fmt.Errorf("unknown format %q: %w", h.Format, ErrCorrupt)
	}
	if len(payload) != h.Length {
		return nil, fmt.Errorf("payload is %d bytes, header says %d (truncated or extended): %w", len(payload), h.Length, ErrCorrupt)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, fmt.Errorf("checksum mismatch: %w", ErrCorrupt)
	}
	return payload, nil
}

func sameContent(a, b *Record) bool {
	ac, bc := *a, *b
	ac.SavedAt, bc.SavedAt = time.Time{}, time.Time{}
	aj, err1 := json.Marshal(&ac)
	bj, err2 := json.Marshal(&bc)
	return err1 == nil && err2 == nil && bytes.Equal(aj, bj)
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

func decode(data []byte) (*Record, error) {
	payload, err := Unframe(Format, data)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(payload, &rec); err != nil {
		return nil, fmt.Errorf("bad payload: %v: %w", err, ErrCorrupt)
	}
	if rec.Pod == nil {
		return nil, fmt.Errorf("no pod in payload: %w", ErrCorrupt)
	}
	return &rec, nil
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
	if err := SyncDir(cdir); err != nil {
		return dst, err
	}
	return dst, SyncDir(s.dir)
}

// Remove deletes the record of id. Removing a missing record is not an error.
func (s *Store) Remove(id ID) error {
	if err := id.valid(); err != nil {
		return err
	}
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint %s: %w", id, err)
	}
	return SyncDir(s.dir)
}

// WriteFileAtomic replaces path with data: it writes a temporary file in the
// same directory (named with a leading dot, which the kubelet's static pod
// source ignores), fsyncs it, renames it over path and fsyncs the directory.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, so a rename or removal in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

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
	return WriteFileAtomic(s.absentPath(id), []byte(since.UTC().Format(time.RFC3339Nano)+"\n"), 0o600)
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
	return SyncDir(s.dir)
}

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
		return n, SyncDir(cdir)
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
