package boltstore

import (
	"net/netip"
	"testing"

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
