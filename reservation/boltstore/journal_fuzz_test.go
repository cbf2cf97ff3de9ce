package boltstore

import (
	"encoding/json"
	"net/netip"
	"slices"
	"testing"

	"github.com/stickyip/stickyip/reservation"
)

// FuzzJournalEntry: whatever ops a journal entry holds — on the store's
// own base, with its right number and checksum, as only a writer's bug or a
// hand edit makes them — every later call still works: it reads the store
// and it can change it. An entry never makes the store fail every call.
func FuzzJournalEntry(f *testing.F) {
	ip := netip.MustParseAddr("10.0.0.9")
	rec, _ := json.Marshal(&reservation.Record{IP: ip, State: reservation.Allocated, ContainerID: "c9", IfName: "eth0"})
	for _, ops := range [][]journalOp{
		{{Net: "n", Put: rec}},
		{{Net: "n", Del: &ip}, {Net: "n", Meta: &[2]string{"bootID", "b"}}},
		{{Net: "n", Put: []byte(`{"ip":"10.0.0.9","state":"bogus"}`)}},
	} {
		f.Add(journalEntry{Ops: ops}.encode()[20:]) // the count of ops and the ops
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newStore(t)
		put(t, s, "10.0.0.2")
		putJournaled(t, s, "10.0.0.3")
		if !rewriteFirstEntry(t, s, func(old []byte) []byte {
			return append(old[:20:20], ops...) // the base and the number kept
		}) {
			return
		}
		held(t, s) // fails the test if the call fails
		put(t, s, "10.0.0.4")
		if got := held(t, s); !slices.Contains(got, "10.0.0.4") {
			t.Fatalf("after a change a call sees %v: 10.0.0.4 is missing", got)
		}
	})
}
