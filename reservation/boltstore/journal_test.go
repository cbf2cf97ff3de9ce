package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/storetest"
	"github.com/stickyip/stickyip/test/harness/strict"
)

// The Txn contract holds when every change goes through the journal: each
// call sees what the earlier ones journaled.
func TestContractJournaled(t *testing.T) { storetest.Run(t, newStore(t).UpdateJournaled) }

// putJournaled records ip for container c through the journal.
func putJournaled(t *testing.T, s *Store, ip string) {
	t.Helper()
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: "c-" + ip, IfName: "eth0"})
	}))
}

// held returns the addresses network n records, as a call sees them.
func held(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	must(t, s.View("n", func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error {
			out = append(out, r.IP.String())
			return nil
		})
	}))
	return out
}

// frameEnds returns where each frame of a journal ends, up to the first
// empty header.
func frameEnds(data []byte) []int {
	var out []int
	for off := 0; off+frameHeader <= len(data) && !bytes.Equal(data[off:off+frameHeader], emptyHeader); {
		off += frameHeader + int(binary.LittleEndian.Uint32(data[off:]))
		out = append(out, off)
	}
	return out
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return b
}

// A journaled change leaves the database file as it was, is seen by every
// later call, and is committed with the next Update, which empties the
// journal.
func TestJournaledChangeIsSeenThenCommitted(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	db := fileBytes(t, s.Path())
	putJournaled(t, s, "10.0.0.3")
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error { return tx.Delete(netip.MustParseAddr("10.0.0.2")) }))
	if !bytes.Equal(fileBytes(t, s.Path()), db) {
		t.Fatal("a journaled change wrote the database")
	}
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Fatalf("after two journaled changes a call sees %v, want [10.0.0.3]", got)
	}
	journal := filepath.Join(s.Dir(), JournalFile)
	if n := len(frameEnds(fileBytes(t, journal))); n != 2 {
		t.Fatalf("journal holds %d entries, want 2", n)
	}
	if n := len(fileBytes(t, journal)); n != journalSize {
		t.Fatalf("journal of %d bytes, want %d (made whole, never grown)", n, journalSize)
	}
	put(t, s, "10.0.0.4")
	if journalHead(s.Dir()) {
		t.Fatal("journal still heads an entry after a commit")
	}
	// What is committed, read straight from the file.
	var stored []string
	must(t, s.viewStored(func(tx *bolt.Tx) error {
		tn, err := openNetwork(tx, "n", false)
		if err != nil {
			return err
		}
		return tn.ForEach(func(r *reservation.Record) error { stored = append(stored, r.IP.String()); return nil })
	}))
	if !slices.Equal(stored, []string{"10.0.0.3", "10.0.0.4"}) {
		t.Fatalf("database holds %v, want [10.0.0.3 10.0.0.4]", stored)
	}
}

// A power loss keeps any part of the journal, unsynced: cut at every byte,
// or with a page of it lost in the middle, the store opens, passes its
// check and shows the changes of the whole entries before the cut, in
// order, never a part of one.
func TestJournalCutAnywhere(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	journal := filepath.Join(s.Dir(), JournalFile)
	for _, ip := range []string{"10.0.0.3", "10.0.0.4", "10.0.0.5"} {
		putJournaled(t, s, ip)
	}
	sizes := frameEnds(fileBytes(t, journal)) // where each entry ends
	full := fileBytes(t, journal)[:sizes[2]+frameHeader]
	want := func(cut int) []string {
		out := []string{"10.0.0.2"}
		for i, n := range sizes {
			if cut >= n {
				out = append(out, []string{"10.0.0.3", "10.0.0.4", "10.0.0.5"}[i])
			}
		}
		return out
	}
	for cut := 0; cut <= len(full); cut++ {
		must(t, os.WriteFile(journal, full[:cut], 0o600))
		if got := held(t, s); !slices.Equal(got, want(cut)) {
			t.Fatalf("journal cut at byte %d of %d: a call sees %v, want %v", cut, len(full), got, want(cut))
		}
		if problems, err := s.Check(); err != nil || len(problems) > 0 {
			t.Fatalf("journal cut at byte %d: check: %v %v", cut, problems, err)
		}
	}
	// The second entry's bytes lost (zeroed), the third kept: only the first counts.
	torn := slices.Clone(full)
	clear(torn[sizes[0]+frameHeader : sizes[1]])
	must(t, os.WriteFile(journal, torn, 0o600))
	if got := held(t, s); !slices.Equal(got, want(sizes[0])) {
		t.Fatalf("second entry lost: a call sees %v, want %v", got, want(sizes[0]))
	}
	// A changed byte that still parses (another address): the checksum
	// stops the reading there.
	changed := slices.Clone(full)
	i := sizes[0] + bytes.Index(full[sizes[0]:sizes[1]], []byte("10.0.0.4"))
	changed[i+7] = '6'
	must(t, os.WriteFile(journal, changed, 0o600))
	if got := held(t, s); !slices.Equal(got, want(sizes[0])) {
		t.Fatalf("second entry changed: a call sees %v, want %v", got, want(sizes[0]))
	}
	// The first entry missing, the second's frame first: nothing counts.
	must(t, os.WriteFile(journal, full[sizes[0]:sizes[1]], 0o600))
	if got := held(t, s); !slices.Equal(got, want(0)) {
		t.Fatalf("journal starting at its second entry: a call sees %v, want %v", got, want(0))
	}
	must(t, os.WriteFile(journal, torn, 0o600))
	// The next journaled change follows the first entry, cutting the rest off.
	putJournaled(t, s, "10.0.0.9")
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.3", "10.0.0.9"}) {
		t.Fatalf("after a change on a torn journal a call sees %v", got)
	}
}

// A journal a commit already holds (the process killed before emptying
// it) is not applied again: a later change of the same address stands.
func TestJournalAppliedOnce(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	putJournaled(t, s, "10.0.0.3")
	journal := filepath.Join(s.Dir(), JournalFile)
	left := fileBytes(t, journal)
	must(t, s.Update("n", func(tx reservation.Txn) error { return tx.Delete(netip.MustParseAddr("10.0.0.3")) }))
	must(t, os.WriteFile(journal, left, 0o600)) // as if the commit's process died before emptying it
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("a call sees %v, want [10.0.0.2]: an entry the database already holds was applied again", got)
	}
}

// A full journal is committed by the next journaled change, synced, so no
// call reads a long one; so is a change too large for it.
func TestJournalBounds(t *testing.T) {
	s := newStore(t)
	journal := filepath.Join(s.Dir(), JournalFile)
	put(t, s, "10.0.1.1")
	for i := range maxJournalEntries {
		putJournaled(t, s, netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}).String())
	}
	if n := len(frameEnds(fileBytes(t, journal))); n != maxJournalEntries {
		t.Fatalf("%d entries, want %d", n, maxJournalEntries)
	}
	putJournaled(t, s, "10.0.0.200")
	if journalHead(s.Dir()) {
		t.Fatalf("journal of %d entries not committed by the next change", maxJournalEntries)
	}
	if n := len(held(t, s)); n != maxJournalEntries+2 {
		t.Fatalf("%d addresses, want %d", n, maxJournalEntries+2)
	}
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
		for i := range maxJournalOps + 1 {
			if err := tx.Delete(netip.AddrFrom4([4]byte{10, 0, 2, byte(i)})); err != nil {
				return err
			}
		}
		return nil
	}))
	if journalHead(s.Dir()) {
		t.Fatalf("a change of %d records was journaled", maxJournalOps+1)
	}
	db := fileBytes(t, s.Path())
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
		for i := range maxJournalOps {
			if err := tx.Delete(netip.AddrFrom4([4]byte{10, 0, 3, byte(i)})); err != nil {
				return err
			}
		}
		return nil
	}))
	if !journalHead(s.Dir()) || !bytes.Equal(fileBytes(t, s.Path()), db) {
		t.Fatalf("a change of %d records, the most one entry holds, was not journaled", maxJournalOps)
	}
	// Changes that fill the file: the one that does not fit is committed.
	big := func(third byte) error {
		return s.UpdateJournaled("n", func(tx reservation.Txn) error {
			for i := range maxJournalOps {
				r := &reservation.Record{IP: netip.AddrFrom4([4]byte{10, 1, third, byte(i)}), State: reservation.Allocated,
					ContainerID: fmt.Sprintf("%064d", int(third)*1000+i), IfName: "eth0", Netns: "/var/run/netns/" + strings.Repeat("n", 100)}
				if err := tx.Put(r); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for third := byte(0); journalHead(s.Dir()) || third == 0; third++ {
		must(t, big(third))
		if third > journalSize/(maxJournalOps*200) {
			t.Fatalf("%d changes of %d records each all journaled in a file of %d bytes", third+1, maxJournalOps, journalSize)
		}
	}
}

// A rebuilt store is a new database: the journal of the damaged one is
// not applied to it.
func TestJournalOfAReplacedStore(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	putJournaled(t, s, "10.0.0.3")
	must(t, os.WriteFile(s.Path(), bytes.Repeat([]byte{0xff}, 4096), 0o600))
	_, err := s.Replace(time.Now(), func(open func(string) (reservation.Txn, error)) error {
		tx, err := open("n")
		if err != nil {
			return err
		}
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.7"), State: reservation.Allocated, ContainerID: "c7", IfName: "eth0"})
	})
	must(t, err)
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.7"}) {
		t.Fatalf("rebuilt store shows %v, want [10.0.0.7]", got)
	}
}

// An entry decodes to what was encoded; every shorter payload is refused.
func TestJournalEntryEncoding(t *testing.T) {
	ip := netip.MustParseAddr("fd00::7")
	e := journalEntry{Base: journalBase{Inode: 7, Txid: 1 << 40}, Seq: 3, Ops: []journalOp{
		{Net: "cbr0", Put: []byte(`{"ip":"10.0.0.2"}`)}, {Net: "cbr0", Del: &ip}, {Net: "n2", Meta: &[2]string{"bootID", "b"}}}}
	p := e.encode()
	got, err := decodeEntry(p)
	if err != nil || got.Base != e.Base || got.Seq != 3 || len(got.Ops) != 3 || string(got.Ops[0].Put) != `{"ip":"10.0.0.2"}` ||
		*got.Ops[1].Del != ip || *got.Ops[2].Meta != *e.Ops[2].Meta || got.Ops[2].Net != "n2" {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, e)
	}
	for n := range len(p) {
		if _, err := decodeEntry(p[:n]); err == nil {
			t.Fatalf("a payload cut to %d of %d bytes decoded", n, len(p))
		}
	}
	// The shortest entries: no op, and one whose last field is empty (a
	// bookkeeping value set to nothing).
	for _, e := range []journalEntry{{Base: e.Base, Seq: 1}, {Base: e.Base, Seq: 2, Ops: []journalOp{{Net: "n", Meta: &[2]string{"k", ""}}}}} {
		got, err := decodeEntry(e.encode())
		if err != nil || got.Seq != e.Seq || len(got.Ops) != len(e.Ops) || len(e.Ops) == 1 && *got.Ops[0].Meta != *e.Ops[0].Meta {
			t.Fatalf("entry %+v decoded as %+v, %v", e, got, err)
		}
	}
}

// rewriteFirstEntry replaces the payload of s's first journal entry with
// what change returns for it, framed as a writer frames it (its length and
// checksum: only its content is wrong). It returns false, changing nothing,
// when the new entry does not fit in the file.
func rewriteFirstEntry(t *testing.T, s *Store, change func(old []byte) []byte) bool {
	t.Helper()
	journal := filepath.Join(s.Dir(), JournalFile)
	data := fileBytes(t, journal)
	end := frameEnds(data)[0]
	payload := change(slices.Clone(data[frameHeader:end]))
	if frameHeader+len(payload) > len(data) {
		return false
	}
	clear(data[:end])
	binary.LittleEndian.PutUint32(data, uint32(len(payload)))
	binary.LittleEndian.PutUint64(data[4:], checksum(payload))
	copy(data[frameHeader:], payload)
	must(t, os.WriteFile(journal, data, 0o600))
	return true
}

// An entry whose frame is whole but whose record is not valid (a writer's
// bug, a hand edit) does not count: the store stays usable.
func TestJournalEntryWithABadRecord(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	putJournaled(t, s, "10.0.0.3")
	rewriteFirstEntry(t, s, func(old []byte) []byte {
		payload := bytes.Replace(old, []byte(`"state":"allocated"`), []byte(`"state":"bogusbogu"`), 1)
		if bytes.Equal(payload, old) {
			t.Fatal("no state in the entry's record")
		}
		return payload
	})
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("a call sees %v, want [10.0.0.2] (the bad entry ignored)", got)
	}
	put(t, s, "10.0.0.4")
}

// A journal's entries of an earlier database state (a crash between a
// commit and the voiding of the journal) are ignored, and the next commit
// voids them: readers then see at once that there are none.
func TestStaleJournalVoidedByTheNextCommit(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	putJournaled(t, s, "10.0.0.3")
	journal := filepath.Join(s.Dir(), JournalFile)
	stale := fileBytes(t, journal)
	put(t, s, "10.0.0.4") // commits 10.0.0.3
	must(t, s.Update("n", func(tx reservation.Txn) error { return tx.Delete(netip.MustParseAddr("10.0.0.3")) }))
	must(t, os.WriteFile(journal, stale, 0o600)) // as if the voiding was lost
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.4"}) {
		t.Fatalf("with a stale journal a call sees %v, want [10.0.0.2 10.0.0.4]", got)
	}
	put(t, s, "10.0.0.5")
	if journalHead(s.Dir()) {
		t.Fatal("a stale journal still heads an entry after a commit")
	}
}

// An entry longer than the journal's first page is read whole: every
// change of a call of maxJournalOps records is seen by the next calls.
func TestJournalEntryBeyondAPage(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.9.9")
	var want []string
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
		for i := range maxJournalOps {
			ip := netip.AddrFrom4([4]byte{10, 1, 0, byte(i)})
			want = append(want, ip.String())
			if err := tx.Put(&reservation.Record{IP: ip, State: reservation.Allocated, ContainerID: fmt.Sprintf("%064d", i), IfName: "eth0",
				Netns: "/var/run/netns/" + strings.Repeat("n", 100)}); err != nil {
				return err
			}
		}
		return nil
	}))
	if ends := frameEnds(fileBytes(t, filepath.Join(s.Dir(), JournalFile))); len(ends) != 1 || ends[0] <= 4096 {
		t.Fatalf("journal frames end at %v, want one entry past the first page", ends)
	}
	putJournaled(t, s, "10.0.9.8")
	want = append(want, "10.0.9.8", "10.0.9.9")
	got := held(t, s)
	slices.SortFunc(want, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
	slices.SortFunc(got, func(a, b string) int { return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b)) })
	if !slices.Equal(got, want) {
		t.Fatalf("after a journaled change of %d records a call sees %d addresses, want %d", maxJournalOps, len(got), len(want))
	}
}

// A journal cut short (a crash while it was made) is written whole again
// by the next entry: the file is journalSize bytes, never more.
func TestJournalCutFileMadeWhole(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	putJournaled(t, s, "10.0.0.3")
	journal := filepath.Join(s.Dir(), JournalFile)
	put(t, s, "10.0.0.4")
	must(t, os.Truncate(journal, 100))
	putJournaled(t, s, "10.0.0.5")
	if n := len(fileBytes(t, journal)); n != journalSize {
		t.Fatalf("journal of %d bytes after a change on one cut to 100, want %d", n, journalSize)
	}
	if got := held(t, s); len(got) != 4 {
		t.Fatalf("a call sees %v, want the four addresses", got)
	}
}

// The journal's base is the database's last committed transaction: a
// binary that reads another's journal agrees on which entries count.
func TestJournalBaseIsTheLastCommit(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	db, err := bolt.Open(s.Path(), 0o600, nil)
	must(t, err)
	defer db.Close()
	var last uint64
	must(t, db.View(func(tx *bolt.Tx) error { last = uint64(tx.ID()); return nil }))
	tx, err := db.Begin(true)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	if b, err := baseOf(tx); err != nil || b.Txid != last {
		t.Fatalf("base %+v (%v), want transaction %d, the last committed", b, err, last)
	}
}

// The journal's file is closed after each call: a daemon that calls the
// store every pass holds no more descriptors after many of them.
func TestJournalClosedAfterEachCall(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	fds := func() int {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			strict.Missing(t, "%v", err)
		}
		return len(ents)
	}
	before := fds()
	for i := range 20 {
		putJournaled(t, s, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}).String())
		held(t, s)
	}
	put(t, s, "10.0.0.3")
	if after := fds(); after > before {
		t.Fatalf("%d descriptors open after 20 journaled calls and reads, %d before", after, before)
	}
}

// An entry that ends just past a page of the file is read whole, wherever
// its end falls in the frame header's length after it: the journal reads
// whole pages, and a frame's last bytes must be among them.
func TestJournalEntryEndingPastAPage(t *testing.T) {
	// entry journals one record whose container ID is pad bytes long and
	// returns the store and where the entry's frame ends.
	entry := func(pad int) (*Store, int) {
		s := New(t.TempDir(), time.Second)
		put(t, s, "10.0.0.2")
		must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
			return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Allocated,
				ContainerID: strings.Repeat("c", pad), IfName: "eth0"})
		}))
		ends := frameEnds(fileBytes(t, filepath.Join(s.Dir(), JournalFile)))
		if len(ends) != 1 {
			t.Fatalf("pad %d: journal frames end at %v, want one entry", pad, ends)
		}
		return s, ends[0]
	}
	_, end := entry(1000)
	for past := 1; past <= frameHeader; past++ {
		s, end := entry(1000 + 4096 + past - end)
		if end != 4096+past {
			t.Fatalf("an entry meant to end at byte %d ends at %d", 4096+past, end)
		}
		if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.3"}) {
			t.Fatalf("an entry ending at byte %d: a call sees %v, want [10.0.0.2 10.0.0.3]", end, got)
		}
	}
}

// A journaled PutAll journals every record it puts: the next call sees all.
func TestJournaledPutAll(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	must(t, s.UpdateJournaled("n", func(tx reservation.Txn) error {
		return tx.PutAll([]*reservation.Record{
			{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Allocated, ContainerID: "c3", IfName: "eth0"},
			{IP: netip.MustParseAddr("10.0.0.4"), State: reservation.Allocated, ContainerID: "c4", IfName: "eth0"},
		})
	}))
	if !journalHead(s.Dir()) {
		t.Fatal("the PutAll was not journaled: the test shows nothing")
	}
	if got := held(t, s); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}) {
		t.Fatalf("after a journaled PutAll a call sees %v, want [10.0.0.2 10.0.0.3 10.0.0.4]", got)
	}
}
