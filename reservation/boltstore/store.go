package boltstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// File names inside the data directory.
const (
	DBFile   = "stickyip.db"
	LockFile = "stickyip.lock"
)

// SchemaVersion is the database layout this binary writes: the last step of
// migrations.
var SchemaVersion = migrations[len(migrations)-1].schema

// Bucket and key names; one variable per name, see the package doc for the tree.
var (
	bucketMeta        = []byte("meta")
	keySchema         = []byte("schema")
	bucketNetworks    = []byte("networks")
	bucketIPs         = []byte("ips")
	bucketContainers  = []byte("containers")
	bucketIdentities  = []byte("identities")
	bucketExpiry      = []byte("expiry")
	bucketBookkeeping = []byte("bookkeeping")
)

// Store is the on-disk store of one data directory. It holds no open file
// between calls; it is safe to use from many processes at once.
type Store struct {
	dir         string
	lockTimeout time.Duration
	witness     func() (string, error) // WithLostWitness
	// newStoreWait: WithNewStoreWait.
	newStoreWait time.Duration
	uses         atomic.Int64 // Uses
}

// Uses returns how many times s has taken the data directory's lock, each
// time to open the database for one operation: what a daemon's test
// counts to hold it to one read of the store per pass.
func (s *Store) Uses() int64 { return s.uses.Load() }

// New returns the store kept in dir. Nothing is opened or created until the
// first Update.
func New(dir string, lockTimeout time.Duration) *Store {
	if lockTimeout <= 0 {
		lockTimeout = contract.DefaultLockTimeout
	}
	return &Store{dir: dir, lockTimeout: lockTimeout}
}

// WithLostWitness sets the test run when the data directory has neither a
// database nor a creation mark, before a new store is created there: a
// directory removed whole looks like one that never had a store. The test
// returns what shows that this node had a store here (ipam.CacheWitness:
// a sandbox that got its address from it), or "" for a new node; with an
// answer, or an error, every call fails as on a lost store
// (reservation.ErrLost) instead of handing out addresses in use. It returns
// s.
func (s *Store) WithLostWitness(w func() (string, error)) *Store {
	s.witness = w
	return s
}

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the database file path.
func (s *Store) Path() string { return filepath.Join(s.dir, DBFile) }

// View runs fn in a read-only transaction on network's records. A missing
// database or network reads as empty.
func (s *Store) View(network string, fn func(reservation.Txn) error) error {
	return s.view(func(tx *bolt.Tx) error {
		t, err := openNetwork(tx, network, false)
		if err != nil {
			return err
		}
		return fn(t)
	})
}

// ViewAll runs fn on each network that has records, in name order, all in
// one read-only transaction: one open of the database for everything a
// daemon reads of the store in a pass. A missing database has no network.
func (s *Store) ViewAll(fn func(network string, tx reservation.Txn) error) error {
	return s.view(func(tx *bolt.Tx) error {
		if tx == nil {
			return nil
		}
		nets := tx.Bucket(bucketNetworks)
		if nets == nil {
			return fmt.Errorf("%w: bucket %q missing", reservation.ErrCorrupt, bucketNetworks)
		}
		var names []string
		if err := nets.ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		}); err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			t, err := openNetwork(tx, n, false)
			if err != nil {
				return err
			}
			if err := fn(n, t); err != nil {
				return fmt.Errorf("network %s: %w", n, err)
			}
		}
		return nil
	})
}

// Networks lists the networks that have records.
func (s *Store) Networks() ([]string, error) {
	var names []string
	err := s.view(func(tx *bolt.Tx) error {
		if tx == nil {
			return nil
		}
		b := tx.Bucket(bucketNetworks)
		if b == nil {
			return nil
		}
		return b.ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		})
	})
	sort.Strings(names)
	return names, err
}

// view runs fn on the store as the calls see it: the database with the
// journal's changes (a transaction rolled back after fn: nothing is written),
// or, without a journal, as stored (viewStored).
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	if err, done := s.viewJournaled(fn); done {
		return err
	}
	return s.viewStored(fn)
}

// viewStored opens the database read-only; fn gets a nil tx when there is
// no database. A store of an older schema is upgraded first (one write
// transaction), so readers see the current layout. The journal is not read.
func (s *Store) viewStored(fn func(tx *bolt.Tx) error) error {
	err := s.viewOnce(fn)
	if !errors.Is(err, errOlderSchema) {
		return err
	}
	if err := s.upgrade(); err != nil {
		return err
	}
	return s.viewOnce(fn)
}

// upgrade migrates the store to SchemaVersion in one write transaction.
func (s *Store) upgrade() error {
	err := s.withDB(false, func(db *bolt.DB) error {
		return db.Update(func(tx *bolt.Tx) error { return checkSchema(tx, true) })
	})
	if err != nil {
		return fmt.Errorf("upgrading the store to schema %d: %w", SchemaVersion, err)
	}
	return nil
}

func (s *Store) viewOnce(fn func(tx *bolt.Tx) error) error {
	return s.withDB(true, func(db *bolt.DB) error {
		if db == nil {
			return fn(nil)
		}
		return db.View(func(tx *bolt.Tx) error {
			if err := checkSchema(tx, false); err != nil {
				return err
			}
			return fn(tx)
		})
	})
}

// withDB takes the directory lock, opens the database for one use, runs fn and
// closes everything. Panics and memory faults from a damaged file become
// ErrCorrupt instead of crashing the caller.
func (s *Store) withDB(readOnly bool, fn func(db *bolt.DB) error) error {
	return s.withRoom(readOnly, 0, fn)
}

// withRoom is withDB with a file mapping of at least room bytes (0: bbolt's
// default), which does not move while a transaction grows the file up to
// that size.
func (s *Store) withRoom(readOnly bool, room int, fn func(db *bolt.DB) error) error {
	lk, err := s.lock(readOnly)
	if err != nil {
		return err
	}
	defer lk.release()

	fresh := false
	switch missing, err := s.present(); {
	case err != nil:
		return err
	case missing && readOnly:
		return fn(nil)
	case missing:
		if err := s.awaitNew(time.Now()); err != nil {
			return err
		}
		if err := s.create(); err != nil {
			return err
		}
		fresh = true
	}
	return s.open(readOnly, !fresh, room, fn)
}

// present checks the database file before it is opened: missing is true
// when the data directory never had one (a lost one is reservation.ErrLost:
// its creation mark, or the witness, says it had), and an empty file is
// damage. The caller holds the lock.
func (s *Store) present() (missing bool, err error) {
	path := s.Path()
	fi, statErr := os.Stat(path)
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		if lost, err := s.marked(); err != nil || lost {
			return false, cmp.Or(err, s.lostError())
		}
		if s.witness != nil {
			seen, err := s.witness()
			if err != nil {
				return false, fmt.Errorf("%w: %s and its creation mark are missing, and whether this node had a store cannot be told (%v): no address is handed out until it can",
					reservation.ErrIO, path, err)
			}
			if seen != "" {
				return false, fmt.Errorf("%w: %s and its creation mark are missing (the data directory removed?), but %s: the addresses its running pods hold are unknown, "+
					"so no address is handed out until the store is rebuilt", reservation.ErrLost, path, seen)
			}
		}
		return true, nil
	case statErr != nil:
		return false, fmt.Errorf("%w: %v", reservation.ErrIO, statErr)
	case fi.Size() == 0:
		return false, fmt.Errorf("%w: %s is empty (truncated?)", reservation.ErrCorrupt, path)
	}
	return false, nil
}

// open opens the existing database for one use and runs fn. A writer of a
// store created before creation marks existed writes the mark (mark). The
// caller holds the lock.
func (s *Store) open(readOnly, mark bool, room int, fn func(db *bolt.DB) error) (err error) {
	path := s.Path()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", reservation.ErrCorrupt, path, r)
		}
	}()

	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:         time.Second,
		ReadOnly:        readOnly,
		InitialMmapSize: room,
		// Never create or initialise a file here: a missing database was created
		// atomically above, and an existing one is only ever opened.
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			return openFile(name, flag&^os.O_CREATE, perm)
		},
	})
	if err != nil {
		return classifyOpenError(path, err)
	}
	if mark && !readOnly {
		if err := s.mark(time.Now()); err != nil {
			_ = db.Close()
			return err
		}
	}
	ferr := fn(db)
	if cerr := db.Close(); cerr != nil && ferr == nil {
		ferr = fmt.Errorf("%w: closing %s: %v", reservation.ErrIO, path, cerr)
	}
	return classifyTxError(ferr)
}

// create initialises a new database in a temporary file and renames it into place.
func (s *Store) create() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	tmp := s.Path() + ".new"
	_ = os.Remove(tmp) // a leftover of a crashed creation; we hold the lock
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("%w: creating %s: %v", reservation.ErrIO, tmp, err)
	}
	err = db.Update(initBuckets)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.Path())
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: creating %s: %v", reservation.ErrIO, s.Path(), err)
	}
	if err := s.mark(time.Now()); err != nil {
		return err
	}
	s.endWait()
	return nil
}

// initBuckets lays out a new database: the schema version and the networks bucket.
func initBuckets(tx *bolt.Tx) error {
	m, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if err := m.Put(keySchema, u64(SchemaVersion)); err != nil {
		return err
	}
	_, err = tx.CreateBucketIfNotExists(bucketNetworks)
	return err
}

func classifyOpenError(path string, err error) error {
	var errno syscall.Errno
	var perr *fs.PathError
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w: %s is held open by another process (not stickyip's lock protocol)", reservation.ErrLocked, path)
	case errors.As(err, &errno), errors.As(err, &perr):
		return fmt.Errorf("%w: opening %s: %v", reservation.ErrIO, path, err)
	default:
		return fmt.Errorf("%w: %s: %v", reservation.ErrCorrupt, path, err)
	}
}

func classifyTxError(err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{reservation.ErrCorrupt, reservation.ErrFutureSchema, reservation.ErrIO, reservation.ErrLocked, reservation.ErrLost, reservation.ErrAwaiting} {
		if errors.Is(err, known) {
			return err
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	return err
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}
