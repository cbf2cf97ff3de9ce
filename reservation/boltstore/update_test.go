package boltstore

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stickyip/stickyip/reservation"
)

// A transaction that asks for room (a bulk load) runs again, once, in one
// that has it, and commits; a second ask is an error, not a loop.
func TestUpdateMakesRoom(t *testing.T) {
	s := newStore(t)
	runs := 0
	must(t, s.Update("n", func(tx reservation.Txn) error {
		runs++
		if !tx.(reservation.Roomy).HasRoom(64 << 20) {
			return &reservation.NeedRoom{Bytes: 64 << 20}
		}
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.2"), State: reservation.Allocated, ContainerID: "c", IfName: "eth0"})
	}))
	if runs != 2 || len(held(t, s)) != 1 {
		t.Fatalf("%d runs, %v held; want 2 runs and the record committed", runs, held(t, s))
	}
	runs = 0
	err := s.Update("n", func(tx reservation.Txn) error { runs++; return &reservation.NeedRoom{Bytes: 1 << 20} })
	var more *reservation.NeedRoom
	if !errors.As(err, &more) || runs != 2 {
		t.Fatalf("a transaction asking for room every time: %v after %d runs; want NeedRoom after 2", err, runs)
	}
}
