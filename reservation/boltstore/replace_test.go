package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// A data directory that had a store and lost its file is not one that never
// had a store: every call fails (the plugin must not start over from an
// empty store while sandboxes hold addresses), reads included, and nothing
// is created.
func TestLostStoreIsNeverStartedOverEmpty(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	put(t, s, "10.0.0.2")
	if _, err := os.Stat(filepath.Join(s.Dir(), MarkFile)); err != nil {
		t.Fatalf("no creation mark after the first write: %v", err)
	}
	must(t, os.Remove(s.Path()))
	for name, call := range map[string]func() error{
		"Update": func() error { return s.Update("n", func(reservation.Txn) error { return nil }) },
		"View":   func() error { return s.View("n", func(reservation.Txn) error { return nil }) },
		"Health": s.Health,
		"Check":  func() error { _, err := s.Check(); return err },
		"Networks": func() error {
			_, err := s.Networks()
			return err
		},
	} {
		err := call()
		if !errors.Is(err, reservation.ErrLost) || !strings.Contains(err.Error(), s.Path()) || !strings.Contains(err.Error(), "(created ") {
			t.Errorf("%s on a lost store: %v, want ErrLost naming %s and when it was created", name, err, s.Path())
		}
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatalf("a call created %s on a lost store", s.Path())
	}
	if err := s.Damage(); !errors.Is(err, reservation.ErrLost) {
		t.Fatalf("Damage = %v, want ErrLost", err)
	}
}

// A store created before creation marks existed gets its mark from the
// first write, so that losing it afterwards is told apart.
func TestOlderStoreIsMarkedByItsFirstWrite(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	put(t, s, "10.0.0.2")
	must(t, os.Remove(filepath.Join(s.Dir(), MarkFile)))
	if err := s.View("n", func(reservation.Txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), MarkFile)); !os.IsNotExist(err) {
		t.Fatal("a read wrote the mark (reads never write)")
	}
	put(t, s, "10.0.0.3")
	if _, err := os.Stat(filepath.Join(s.Dir(), MarkFile)); err != nil {
		t.Fatalf("no mark after a write: %v", err)
	}
}

func rebuildOne(ip string) func(open func(string) (reservation.Txn, error)) error {
	return func(open func(string) (reservation.Txn, error)) error {
		tx, err := open("n")
		if err != nil {
			return err
		}
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: "rebuilt", IfName: "eth0"})
	}
}

func TestReplaceKeepsTheDamagedBytes(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	damaged := bytes.Repeat([]byte("not a bbolt page "), 2048)
	must(t, os.WriteFile(s.Path(), damaged, 0o600))
	if err := s.Damage(); !errors.Is(err, reservation.ErrCorrupt) {
		t.Fatalf("Damage = %v, want ErrCorrupt", err)
	}
	now := time.Date(2026, 11, 27, 10, 15, 0, 0, time.UTC)
	got, err := s.Replace(now, rebuildOne("10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.Dir(), "stickyip.db.damaged-20261127T101500Z"); got.Aside != want || !errors.Is(got.Why, reservation.ErrCorrupt) {
		t.Fatalf("Replace = %+v, want the damage kept as %s", got, want)
	}
	kept, err := os.ReadFile(got.Aside)
	if err != nil || !bytes.Equal(kept, damaged) {
		t.Fatalf("the damaged bytes are not kept as they were: %v", err)
	}
	var rec *reservation.Record
	must(t, s.View("n", func(tx reservation.Txn) (err error) { rec, err = tx.Get(netip.MustParseAddr("10.0.0.9")); return err }))
	if rec == nil || rec.ContainerID != "rebuilt" {
		t.Fatalf("rebuilt store holds %+v", rec)
	}
	if err := s.Damage(); err != nil {
		t.Fatalf("Damage after the rebuild = %v", err)
	}
	// A usable store is never replaced.
	if _, err := s.Replace(now.Add(time.Minute), rebuildOne("10.0.0.10")); !errors.Is(err, ErrUsable) {
		t.Fatalf("Replace of a usable store = %v, want ErrUsable", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(s.Dir(), AsidePrefix+"*")); len(matches) != 1 {
		t.Fatalf("kept files: %v", matches)
	}
}

func TestReplaceOfALostStore(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	must(t, os.Remove(s.Path()))
	got, err := s.Replace(time.Now(), rebuildOne("10.0.0.2"))
	if err != nil || got.Aside != "" || !errors.Is(got.Why, reservation.ErrLost) {
		t.Fatalf("Replace = %+v, %v", got, err)
	}
	put(t, s, "10.0.0.3")
}

// A rebuild interrupted after the damaged file got its second name, or
// after its new database was written, is finished by the next: one kept
// name for the damaged file, and no leftover.
func TestReplaceAfterAnInterruptedOne(t *testing.T) {
	s := newStore(t)
	put(t, s, "10.0.0.2")
	must(t, os.WriteFile(s.Path(), []byte("garbage garbage garbage"), 0o600))
	first := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	if _, err := s.keepAside(first); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(s.Dir(), rebuildFile), []byte("half a database"), 0o600))
	got, err := s.Replace(first.Add(time.Hour), rebuildOne("10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got.Aside, "20261127T100000Z") {
		t.Fatalf("kept as %s, want the name the interrupted rebuild gave it", got.Aside)
	}
	if matches, _ := filepath.Glob(filepath.Join(s.Dir(), AsidePrefix+"*")); len(matches) != 1 {
		t.Fatalf("kept files: %v", matches)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), rebuildFile)); !os.IsNotExist(err) {
		t.Fatalf("leftover %s: %v", rebuildFile, err)
	}
}

// A failing build changes nothing: the damaged file stays where it was.
func TestReplaceWhoseBuildFails(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	put(t, s, "10.0.0.2")
	must(t, os.Truncate(s.Path(), 100))
	boom := errors.New("boom")
	_, err := s.Replace(time.Now(), func(func(string) (reservation.Txn, error)) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Replace = %v, want the build's error", err)
	}
	if fi, err := os.Stat(s.Path()); err != nil || fi.Size() != 100 {
		t.Fatalf("the damaged file changed: %v %v", fi, err)
	}
	if m, _ := filepath.Glob(filepath.Join(s.Dir(), "stickyip.db.*")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
}

// A newer schema is not damage: a rebuild would throw away what the newer
// stickyip wrote; installing it again reads it all.
func TestReplaceRefusesANewerSchema(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	put(t, s, "10.0.0.2")
	db, err := bolt.Open(s.Path(), 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, u64(SchemaVersion+1)) }))
	must(t, db.Close())
	if err := s.Damage(); !errors.Is(err, reservation.ErrFutureSchema) {
		t.Fatalf("Damage = %v", err)
	}
	if _, err := s.Replace(time.Now(), rebuildOne("10.0.0.9")); !errors.Is(err, reservation.ErrFutureSchema) {
		t.Fatalf("Replace = %v, want ErrFutureSchema", err)
	}
}

// A data directory removed whole, its creation mark with it, is lost, not
// new, when the witness says a sandbox got its address from it: every call
// fails and no database is created; Damage reports it, so a rebuild runs;
// the rebuild's new store is used from then on. A witness that cannot
// answer fails every call too. On a new node (no answer) the first write
// creates the store, and the witness is not asked again once the mark
// exists.
func TestDirectoryRemovedWhole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	asked := 0
	answer, answerErr := "", error(nil)
	s := New(dir, time.Second).WithLostWitness(func() (string, error) {
		asked++
		return answer, answerErr
	})
	put(t, s, "10.0.0.2")
	if asked != 1 {
		t.Fatalf("witness asked %d times to create a new store, want 1", asked)
	}
	put(t, s, "10.0.0.3")
	if asked != 1 {
		t.Fatalf("witness asked again with the store in place (%d)", asked)
	}

	must(t, os.RemoveAll(dir))
	answer = "the runtime's CNI result cache holds cbr0-c1-eth0"
	for name, call := range map[string]func() error{
		"Update": func() error { return s.Update("n", func(reservation.Txn) error { return nil }) },
		"View":   func() error { return s.View("n", func(reservation.Txn) error { return nil }) },
		"Health": s.Health,
		"Damage": s.Damage,
	} {
		err := call()
		if !errors.Is(err, reservation.ErrLost) || !strings.Contains(err.Error(), answer) {
			t.Errorf("%s on a directory removed whole: %v, want ErrLost naming the witness", name, err)
		}
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatalf("a call created %s on a lost store", s.Path())
	}

	answer, answerErr = "", errors.New("permission denied")
	if err := s.Update("n", func(reservation.Txn) error { return nil }); !errors.Is(err, reservation.ErrIO) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Update with a witness that cannot answer: %v, want ErrIO naming why", err)
	}
	if _, err := os.Stat(s.Path()); !os.IsNotExist(err) {
		t.Fatalf("a call created %s while the witness could not answer", s.Path())
	}

	answer, answerErr = "the runtime's CNI result cache holds cbr0-c1-eth0", nil
	got, err := s.Replace(time.Now(), rebuildOne("10.0.0.2"))
	if err != nil || got.Aside != "" || !errors.Is(got.Why, reservation.ErrLost) {
		t.Fatalf("Replace = %+v, %v", got, err)
	}
	asked = 0
	put(t, s, "10.0.0.4")
	if asked != 0 {
		t.Fatalf("witness asked %d times after the rebuild (the new store has its mark)", asked)
	}
}

// A store whose pages are whole but one of whose records does not decode
// is damaged: a call would fail on it, so Damage says so, naming the
// network, and the first network's record counts as much as the last's.
func TestDamageOfAnUndecodableRecord(t *testing.T) {
	for _, bad := range []string{"a", "z"} {
		s := New(t.TempDir(), time.Second)
		for _, n := range []string{"a", "m", "z"} {
			must(t, s.Update(n, func(tx reservation.Txn) error {
				return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.2"), State: reservation.Allocated, ContainerID: "c", IfName: "eth0"})
			}))
		}
		db, err := bolt.Open(s.Path(), 0o600, nil)
		must(t, err)
		must(t, db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketNetworks).Bucket([]byte(bad)).Bucket(bucketIPs).Put(addrKey(netip.MustParseAddr("10.0.0.3")), []byte(`{"ip":`))
		}))
		must(t, db.Close())
		if err := s.Damage(); !errors.Is(err, reservation.ErrCorrupt) || !strings.Contains(err.Error(), `network "`+bad+`"`) {
			t.Errorf("a record of network %s that does not decode: Damage = %v, want ErrCorrupt naming the network", bad, err)
		}
	}
}

// Damaged files kept in the same second get the same name with .2, .3...
// after it, never overwriting one kept before.
func TestDamagedFilesKeptInOneSecond(t *testing.T) {
	s := New(t.TempDir(), time.Second)
	now := time.Date(2026, 11, 27, 10, 15, 0, 0, time.UTC)
	base := filepath.Join(s.Dir(), "stickyip.db.damaged-20261127T101500Z")
	for i, want := range []string{base, base + ".2", base + ".3"} {
		must(t, os.MkdirAll(s.Dir(), 0o755))
		must(t, os.WriteFile(s.Path(), []byte(fmt.Sprint("damage ", i)), 0o600))
		got, err := s.keepAside(now)
		if err != nil || got != want {
			t.Fatalf("damaged file %d kept as %q (%v), want %q", i+1, got, err, want)
		}
		must(t, os.Remove(s.Path()))
	}
}
