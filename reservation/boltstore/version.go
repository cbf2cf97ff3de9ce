package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/stickyip/stickyip/reservation"
)

// versionSeed seeds Version's hashes (a process compares only its own).
var versionSeed = maphash.MakeSeed()

// Version returns a value that changes with every transaction committed to
// the store (each rewrites one of the database's two meta pages with its
// transaction ID), with every change of its journal (a DEL's), and when the
// file is replaced (a rebuild): a daemon that read the store and finds the
// same version again knows it would read the same. It reads the two meta
// pages and the journal, and takes no lock: a commit in progress shows the
// version before it, whose pages bbolt leaves as they were. A store with
// no database has version 0.
func (s *Store) Version() (uint64, error) {
	var h maphash.Hash
	h.SetSeed(versionSeed)
	f, err := os.Open(s.Path())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		_ = binary.Write(&h, binary.LittleEndian, [2]uint64{st.Dev, st.Ino})
	}
	// The page size is in the first meta page (after the page header, the
	// magic and the version); both meta pages follow each other from 0.
	head := make([]byte, 32)
	if _, err := io.ReadFull(f, head); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", reservation.ErrCorrupt, s.Path(), err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[24:28]))
	if pageSize < 512 || pageSize > 1<<16 {
		return 0, fmt.Errorf("%w: %s: page size %d", reservation.ErrCorrupt, s.Path(), pageSize)
	}
	meta := make([]byte, 2*pageSize)
	if _, err := f.ReadAt(meta, 0); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", reservation.ErrCorrupt, s.Path(), err)
	}
	_, _ = h.Write(meta)
	if j, err := os.Open(filepath.Join(s.dir, JournalFile)); err == nil {
		var buf [8 << 10]byte
		for {
			n, err := j.Read(buf[:])
			_, _ = h.Write(buf[:n])
			if err != nil {
				break
			}
		}
		_ = j.Close()
	}
	return h.Sum64(), nil
}
