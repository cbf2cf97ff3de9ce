package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
)

// Health reports whether the store can serve an ADD: the data directory is
// writable and has space, and the database (when it exists) opens and carries
// a schema this binary understands. It reads only; a lock held by another
// process past the lock timeout is not a health problem (that call will end,
// and an ADD would retry) and is reported as nil.
//
// It is what CNI STATUS asks, every few seconds, on behalf of the container
// runtime, so it never writes and never syncs.
func (s *Store) Health() error {
	if err := dirWritable(s.dir); err != nil {
		return err
	}
	err := s.viewStored(readRoots) // what an ADD reads first; the journal does not matter here
	if errors.Is(err, reservation.ErrLocked) {
		return nil
	}
	return err
}

// readRoots reads what every ADD reads first: the networks bucket, each
// network's buckets, and the first and last page of each network's
// addresses; and checks that the file holds every page its meta page counts
// (a file cut short keeps its first pages readable, while a writer would
// read the freelist or a branch past its end). It catches a destroyed meta
// page or branch, or a cut file, at the cost of a few page reads and a
// stat, not a full check (that is `stickyip check`).
func readRoots(tx *bolt.Tx) error {
	if tx == nil {
		return nil
	}
	fi, err := os.Stat(tx.DB().Path())
	if err != nil {
		return fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	if fi.Size() < tx.Size() {
		return fmt.Errorf("%w: %s: %d bytes, but its pages reach byte %d: the file was cut short", reservation.ErrCorrupt, tx.DB().Path(), fi.Size(), tx.Size())
	}
	nets := tx.Bucket(bucketNetworks)
	if nets == nil {
		return fmt.Errorf("%w: %s: bucket %q missing", reservation.ErrCorrupt, tx.DB().Path(), bucketNetworks)
	}
	return nets.ForEachBucket(func(name []byte) error {
		t, err := openNetwork(tx, string(name), false)
		if err != nil {
			return fmt.Errorf("%s: %w", tx.DB().Path(), err)
		}
		c := t.ips.Cursor()
		for _, k := range [][]byte{first(c.First()), first(c.Last())} {
			if k != nil && len(k) != 16 {
				return fmt.Errorf("%w: %s: network %q has an address key of %d bytes", reservation.ErrCorrupt, tx.DB().Path(), name, len(k))
			}
		}
		return nil
	})
}

func first(k, _ []byte) []byte { return k }

// dirWritable checks, without writing, that the data directory (or, before
// the first ADD, the nearest existing parent it will be created in) is
// writable by this process and its file system has free blocks.
func dirWritable(dir string) error {
	d := dir
	for {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%w: data directory %s: %s is not a directory", reservation.ErrIO, dir, d)
			}
			break
		}
		if !errors.Is(err, os.ErrNotExist) || d == "/" || d == "." {
			return fmt.Errorf("%w: data directory %s: %v", reservation.ErrIO, dir, err)
		}
		d = filepath.Dir(d)
	}
	if err := unix.Access(d, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%w: data directory %s cannot be written: %v", reservation.ErrIO, d, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d, &st); err == nil && st.Bfree == 0 {
		return fmt.Errorf("%w: data directory %s: no space left on its file system", reservation.ErrIO, d)
	}
	return nil
}
