package boltstore

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// The version changes with every commit and every journaled DEL, and not
// with a read: what a daemon relies on to skip reading a store that did
// not change.
func TestVersion(t *testing.T) {
	s := newStore(t)
	version := func() uint64 {
		t.Helper()
		v, err := s.Version()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(); v != 0 {
		t.Fatalf("a store without a database has version %d, want 0", v)
	}
	put(t, s, "10.0.0.2")
	v1 := version()
	if err := s.View("n", func(reservation.Txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v1 {
		t.Fatal("a read changed the version")
	}
	put(t, s, "10.0.0.3")
	v2 := version()
	if v2 == v1 {
		t.Fatal("a commit did not change the version")
	}
	err := s.UpdateJournaled("n", func(tx reservation.Txn) error { return tx.Delete(netip.MustParseAddr("10.0.0.3")) })
	if err != nil {
		t.Fatal(err)
	}
	v3 := version()
	if v3 == v2 {
		t.Fatal("a journaled DEL did not change the version")
	}
	put(t, s, "10.0.0.4") // commits the journal with its own change
	if v := version(); v == v3 || v == v2 {
		t.Fatal("the commit of the journal did not change the version")
	}
}

// A journaled change far into the journal changes the version too: the
// whole journal counts, not its first read.
func TestVersionSeesTheWholeJournal(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error { // one entry of about 12 KiB
		for i := range 40 {
			r := &reservation.Record{IP: netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), State: reservation.Allocated,
				ContainerID: fmt.Sprintf("%0200d", i), IfName: "eth0"}
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	}))
	if ends := frameEnds(fileBytes(t, filepath.Join(s.Dir(), JournalFile))); len(ends) != 1 || ends[0] <= 8<<10 {
		t.Fatalf("journal frames end at %v, want one entry past 8 KiB", ends)
	}
	before, err := s.Version()
	must(t, err)
	putJournaled(t, s, "10.0.0.3")
	if after, err := s.Version(); err != nil || after == before {
		t.Fatalf("a journaled change after 8 KiB of journal: version %d then %d (%v), want a new one", before, after, err)
	}
}

// A database whose pages are the smallest or the largest bbolt makes (a
// machine with 64 KiB memory pages makes the largest) has a version.
func TestVersionOfEveryPageSize(t *testing.T) {
	for _, size := range []int{512, 1 << 16} {
		s := New(t.TempDir(), time.Second)
		db, err := bolt.Open(s.Path(), 0o600, &bolt.Options{PageSize: size})
		must(t, err)
		must(t, db.Update(initBuckets))
		must(t, db.Close())
		if _, err := s.Version(); err != nil {
			t.Errorf("pages of %d bytes: %v", size, err)
		}
	}
}
