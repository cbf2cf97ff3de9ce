package boltstore

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness/strict"
)

// TestHealthOfWholeStores: a network whose records are all gone, and a file
// that ends exactly where its pages do, are healthy.
func TestHealthOfWholeStores(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	must(t, s.Update("n", func(tx reservation.Txn) error { return tx.Delete(netip.MustParseAddr("10.0.0.2")) }))
	if err := s.Health(); err != nil {
		t.Fatalf("a network without records: %v", err)
	}

	put(t, s, "10.0.0.3")
	var used int64
	db, err := bolt.Open(s.Path(), 0o600, &bolt.Options{ReadOnly: true})
	must(t, err)
	must(t, db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }))
	must(t, db.Close())
	must(t, os.Truncate(s.Path(), used)) // what bbolt allocated ahead goes
	if err := s.Health(); err != nil {
		t.Fatalf("a file of exactly its pages (%d bytes): %v", used, err)
	}
}

// TestHealthOfAFullFileSystem: a data directory on a file system without a
// free block cannot take an ADD, and STATUS says so.
func TestHealthOfAFullFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		strict.Missing(t, "needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	s := New(filepath.Join(dir, "data"), time.Second)
	put(t, s, "10.0.0.2")
	if err := s.Health(); err != nil {
		t.Fatalf("before the file system is full: %v", err)
	}
	f, err := os.Create(filepath.Join(dir, "fill"))
	must(t, err)
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	must(t, f.Close())
	if err := s.Health(); !errors.Is(err, reservation.ErrIO) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("a full file system: %v, want ErrIO saying no space is left", err)
	}
}
