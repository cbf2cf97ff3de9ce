package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/storetest"
)

// newStore returns a store in a fresh directory whose invariants are checked
// when the test ends (bbolt's btesting does the same for its own tests).
func newStore(t *testing.T) *Store {
	t.Helper()
	s := New(t.TempDir(), 2*time.Second)
	t.Cleanup(func() {
		if _, err := os.Stat(s.Path()); err != nil {
			return
		}
		problems, err := s.Check()
		if err != nil || len(problems) > 0 {
			t.Errorf("store invariants at cleanup: %v %v", err, problems)
		}
	})
	return s
}

func TestContract(t *testing.T) { storetest.Run(t, newStore(t).Update) }

func put(t *testing.T, s *Store, ip string) {
	t.Helper()
	err := s.Update("n", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: "c-" + ip, IfName: "eth0"})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestViewOfMissingStoreIsEmptyAndCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	s := New(dir, time.Second)
	err := s.View("n", func(tx reservation.Txn) error {
		r, err := tx.Get(netip.MustParseAddr("10.0.0.1"))
		if r != nil || err != nil {
			t.Errorf("Get on empty view: %v %v", r, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a read created %s", dir)
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	again := New(s.Dir(), time.Second)
	var got *reservation.Record
	_ = again.View("n", func(tx reservation.Txn) (err error) { got, err = tx.Get(netip.MustParseAddr("10.0.0.2")); return err })
	if got == nil || got.ContainerID != "c-10.0.0.2" {
		t.Fatalf("after reopen: %+v", got)
	}
	if nets, _ := again.Networks(); len(nets) != 1 || nets[0] != "n" {
		t.Fatalf("Networks = %v", nets)
	}
}

func TestDamagedFilesAreReportedAndLeftUntouched(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		want   error
	}{
		{"empty", func(t *testing.T, p string) { must(t, os.Truncate(p, 0)) }, reservation.ErrCorrupt},
		{"truncated", func(t *testing.T, p string) { must(t, os.Truncate(p, 6000)) }, reservation.ErrCorrupt},
		{"random bytes", func(t *testing.T, p string) {
			b := bytes.Repeat([]byte{0x5a, 0xc3, 0x11, 0x7e}, 8192)
			must(t, os.WriteFile(p, b, 0o600))
		}, reservation.ErrCorrupt},
		{"future schema", func(t *testing.T, p string) {
			db, err := bolt.Open(p, 0o600, nil)
			must(t, err)
			must(t, db.Update(func(tx *bolt.Tx) error {
				v := make([]byte, 8)
				binary.BigEndian.PutUint64(v, SchemaVersion+1)
				return tx.Bucket(bucketMeta).Put(keySchema, v)
			}))
			must(t, db.Close())
		}, reservation.ErrFutureSchema},
		{"not a stickyip database", func(t *testing.T, p string) {
			db, err := bolt.Open(p, 0o600, nil)
			must(t, err)
			must(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketMeta) }))
			must(t, db.Close())
		}, reservation.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(t.TempDir(), time.Second)
			put(t, s, "10.0.0.2")
			tc.damage(t, s.Path())
			before, _ := os.ReadFile(s.Path())
			err := s.Update("n", func(tx reservation.Txn) error { return nil })
			if !errors.Is(err, tc.want) {
				t.Fatalf("Update on %s file: err = %v, want %v", tc.name, err, tc.want)
			}
			if !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("Update on %s file: %q does not name the file", tc.name, err)
			}
			if _, err := s.Check(); !errors.Is(err, tc.want) {
				t.Fatalf("Check on %s file: err = %v", tc.name, err)
			}
			// STATUS asks Health: a damaged store is the one case where the
			// node must report its network not ready.
			if err := s.Health(); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("Health on %s file: err = %v, want %v naming the file", tc.name, err, tc.want)
			}
			after, _ := os.ReadFile(s.Path())
			if !bytes.Equal(before, after) {
				t.Fatalf("the damaged file was modified")
			}
		})
	}
}

func TestLockTimeoutIsErrLocked(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	f, err := os.OpenFile(filepath.Join(s.Dir(), LockFile), os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	short := New(s.Dir(), 200*time.Millisecond)
	start := time.Now()
	err = short.Update("n", func(reservation.Txn) error { return nil })
	if !errors.Is(err, reservation.ErrLocked) || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("err = %v, want ErrLocked after 200ms", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("gave up after %v", waited)
	}
	// Released: the next call goes through at once.
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	put(t, short, "10.0.0.3")
}

// The lock call fails (an I/O error of the kernel's) just as the timer
// fires: both are ready when the waiter looks, and whichever it sees first
// the answer is the I/O error, not "locked" (a caller would wait and retry
// what cannot succeed), and the lock file's descriptor is closed, not
// leaked. Go's select picks a ready case at random: 64 rounds see both
// orders (all but once in 2^63).
func TestLockCallFailingAsTimerFires(t *testing.T) {
	path := filepath.Join(t.TempDir(), LockFile)
	for range 64 {
		f, err := os.Create(path)
		must(t, err)
		done, expired := make(chan error, 1), make(chan time.Time, 1)
		done <- unix.EIO
		expired <- time.Now()
		err = awaitFlock(f, done, expired, time.Second)
		if !errors.Is(err, reservation.ErrIO) || errors.Is(err, reservation.ErrLocked) {
			f.Close()
			t.Fatalf("err = %v, want the I/O error, not ErrLocked", err)
		}
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			f.Close()
			t.Fatalf("the lock file is still open after the failed lock (a descriptor leaked per call): Stat: %v", err)
		}
	}
}

// A writer finding the lock held queues on it in the kernel and proceeds
// once it is released. The verdict waits for the kernel's word that the
// writer is queued (a blocked flock on the lock file in /proc/locks), not
// for a sleep: a test that slept and checked only that the write succeeded
// would pass a store ignoring the lock.
func TestWaitersQueueOnTheLock(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	lockFile := filepath.Join(s.Dir(), LockFile)
	f, err := os.OpenFile(lockFile, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	done := make(chan error, 1)
	go func() { done <- s.Update("n", func(reservation.Txn) error { return nil }) }()
	deadline := time.Now().Add(10 * time.Second)
	for flockWaiters(t, lockFile) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the write returned (%v) while the lock was held: it did not queue", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no writer queued on the lock in /proc/locks after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the write returned (%v) while queued on the held lock", err)
	default:
	}
	released := time.Now()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := flockWaiters(t, lockFile); n != 0 {
		t.Errorf("%d writers still queued on the lock after the write returned", n)
	}
	// bbolt's own lock would poll every 50 ms; ours is woken by the kernel.
	t.Logf("writer queued in the kernel, proceeded %v after the release", time.Since(released))
}

// flockWaiters counts the flock requests blocked on path's inode, as the
// kernel lists them in /proc/locks ("-> FLOCK ... <major>:<minor>:<inode>").
func flockWaiters(t *testing.T, path string) int {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(path, &st))
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := os.ReadFile("/proc/locks")
	must(t, err)
	n := 0
	for _, l := range strings.Split(string(locks), "\n") {
		f := strings.Fields(l)
		if len(f) > 6 && f[1] == "->" && f[2] == "FLOCK" && f[6] == id {
			n++
		}
	}
	return n
}

// Health is what CNI STATUS reports to the runtime: it fails only when no
// ADD could succeed, never for a busy or full store, and it never writes.
func TestHealth(t *testing.T) {
	t.Run("no database yet, directory to be created", func(t *testing.T) {
		s := New(filepath.Join(t.TempDir(), "a", "b"), time.Second)
		if err := s.Health(); err != nil {
			t.Fatalf("Health before the first ADD: %v", err)
		}
		if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Health created the data directory (stat: %v)", err)
		}
	})
	t.Run("healthy store", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "10.0.0.2")
		before, _ := os.ReadFile(s.Path())
		if err := s.Health(); err != nil {
			t.Fatal(err)
		}
		if after, _ := os.ReadFile(s.Path()); !bytes.Equal(before, after) {
			t.Fatal("Health modified the database")
		}
	})
	t.Run("data directory is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		must(t, os.WriteFile(f, nil, 0o600))
		err := New(f, time.Second).Health()
		if !errors.Is(err, reservation.ErrIO) || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("err = %v, want ErrIO saying it is not a directory", err)
		}
	})
	t.Run("lock held by a writer", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "10.0.0.2")
		f, err := os.OpenFile(filepath.Join(s.Dir(), LockFile), os.O_RDWR, 0)
		must(t, err)
		defer f.Close()
		must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
		if err := New(s.Dir(), 100*time.Millisecond).Health(); err != nil {
			t.Fatalf("a held lock failed Health: %v", err)
		}
	})
}

func TestCheckFindsBrokenIndex(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	put(t, s, "10.0.0.2")
	db, err := bolt.Open(s.Path(), 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNetworks).Bucket([]byte("n")).Bucket(bucketContainers).Put([]byte("ghost\x00eth0\x00"+strings.Repeat("\x00", 16)), nil)
	}))
	must(t, db.Close())
	problems, err := s.Check()
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0], "no record owns") {
		t.Fatalf("Check = %v, %v", problems, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckFindsDoubleHolders: a container, or an identity, holding two
// addresses of one range set is reported, naming both; records outside
// every range set (-1) are not compared.
func TestCheckFindsDoubleHolders(t *testing.T) {
	id := reservation.Identity{Namespace: "db", Name: "db-0", IfName: "eth0"}
	for _, set := range []int{0, 1, -1} {
		s := New(t.TempDir(), time.Second)
		must(t, s.Update("n", func(tx reservation.Txn) error {
			for _, ip := range []string{"10.0.0.2", "10.0.0.3"} {
				if err := tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), RangeSet: set, State: reservation.Allocated,
					ContainerID: "c1", IfName: "eth0", Identity: id}); err != nil {
					return err
				}
			}
			return nil
		}))
		problems, err := s.Check()
		all := strings.Join(problems, "\n")
		if set < 0 {
			if err != nil || len(problems) != 0 {
				t.Errorf("range set -1: %v %v, want nothing reported", problems, err)
			}
			continue
		}
		if err != nil || len(problems) != 2 ||
			!strings.Contains(all, fmt.Sprintf("container c1/eth0 in range set %d holds both 10.0.0.2 and 10.0.0.3", set)) ||
			!strings.Contains(all, fmt.Sprintf("identity %s in range set %d holds both", id, set)) {
			t.Errorf("range set %d: %v %v, want the container and the identity reported", set, problems, err)
		}
	}
}

// A lock timeout of 0 is the store's default: a call waits for a writer
// that holds the store briefly, rather than failing at once.
func TestZeroLockTimeoutWaits(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	f, err := os.OpenFile(filepath.Join(s.Dir(), LockFile), os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}()
	if err := New(s.Dir(), 0).Update("n", func(reservation.Txn) error { return nil }); err != nil {
		t.Fatalf("a write with lock timeout 0 behind a writer of 300 ms: %v", err)
	}
}
