package boltstore

import (
	"bytes"
	"encoding/json"
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

// writeSchema1 writes a database as stickyip with schema 1 did: top-level
// meta (schema 1), one network with a record, its index entry and a
// per-network "meta" bucket.
func writeSchema1(t *testing.T, dir string) { writeSchema1Networks(t, dir, 1, "cbr0") }

// writeSchema1Networks writes a schema-1 database of the networks nets,
// each with records of n identities (default/web, default/web-1, ...).
func writeSchema1Networks(t *testing.T, dir string, n int, nets ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucket([]byte("meta"))
		must(t, err)
		must(t, m.Put([]byte("schema"), u64(1)))
		networks, err := tx.CreateBucket([]byte("networks"))
		must(t, err)
		for _, net := range nets {
			nb, err := networks.CreateBucket([]byte(net))
			must(t, err)
			for _, name := range []string{"ips", "containers", "identities", "expiry", "meta"} {
				_, err := nb.CreateBucket([]byte(name))
				must(t, err)
			}
			for i := range n {
				name, cid := "web", "c1"
				if i > 0 {
					name, cid = fmt.Sprintf("web-%d", i), fmt.Sprintf("c%d", i+1)
				}
				rec := &reservation.Record{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(2 + i)}), State: reservation.Allocated, ContainerID: cid, IfName: "eth0",
					Identity: reservation.Identity{Namespace: "default", Name: name, IfName: "eth0"}, AllocatedAt: time.Now().UTC()}
				v, err := json.Marshal(rec)
				must(t, err)
				must(t, nb.Bucket([]byte("ips")).Put(addrKey(rec.IP), v))
				must(t, nb.Bucket([]byte("containers")).Put(append(containerPrefix(cid, "eth0"), addrKey(rec.IP)...), nil))
				must(t, nb.Bucket([]byte("identities")).Put(append(identityPrefix(rec.Identity), addrKey(rec.IP)...), nil))
			}
			must(t, nb.Bucket([]byte("meta")).Put([]byte("bootID"), []byte("boot-1")))
		}
		return nil
	}))
	must(t, db.Close())
}

func schemaOf(t *testing.T, path string) (uint64, bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	must(t, err)
	defer db.Close()
	var v uint64
	var oldBucket bool
	must(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("meta")).Get([]byte("schema"))
		v = uint64(b[7]) | uint64(b[6])<<8
		oldBucket = tx.Bucket([]byte("networks")).Bucket([]byte("cbr0")).Bucket([]byte("meta")) != nil
		return nil
	}))
	return v, oldBucket
}

// A reader (the operator tool's list, STATUS) of a schema-1 store gets the
// records and settings, and leaves the store upgraded.
func TestMigrateSchema1OnRead(t *testing.T) {
	dir := t.TempDir()
	writeSchema1(t, dir)
	s := New(dir, time.Second)
	var got []*reservation.Record
	var boot string
	err := s.View("cbr0", func(tx reservation.Txn) error {
		boot, _ = tx.Meta("bootID")
		return tx.ForEach(func(r *reservation.Record) error { got = append(got, r); return nil })
	})
	if err != nil || len(got) != 1 || got[0].ContainerID != "c1" || boot != "boot-1" {
		t.Fatalf("View of a schema-1 store: %v, %+v, bootID %q", err, got, boot)
	}
	if v, old := schemaOf(t, s.Path()); v != SchemaVersion || old {
		t.Fatalf("after the read: schema %d, old meta bucket %t; want %d, gone", v, old, SchemaVersion)
	}
	if problems, err := s.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("migrated store: %v %v", err, problems)
	}
}

// A writer migrates in its own transaction, and the data is kept.
func TestMigrateSchema1OnWrite(t *testing.T) {
	dir := t.TempDir()
	writeSchema1(t, dir)
	s := New(dir, time.Second)
	err := s.Update("cbr0", func(tx reservation.Txn) error {
		recs, err := tx.ByContainer("c1", "eth0")
		if err != nil || len(recs) != 1 {
			t.Errorf("ByContainer after migration: %v %v", recs, err)
		}
		if v, _ := tx.Meta("bootID"); v != "boot-1" {
			t.Errorf("bookkeeping lost: bootID %q", v)
		}
		return tx.SetMeta("bootID", "boot-2")
	})
	must(t, err)
	if v, old := schemaOf(t, s.Path()); v != SchemaVersion || old {
		t.Fatalf("schema %d, old bucket %t", v, old)
	}
}

// Each step on its own: renameNetworkMeta copes with a network that has no
// old bucket (created by a schema-2 binary in a store still at schema 1 is
// impossible, but a step must be safe to run on any schema-1 layout).
func TestRenameNetworkMetaStep(t *testing.T) {
	dir := t.TempDir()
	writeSchema1(t, dir)
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	must(t, err)
	defer db.Close()
	must(t, db.Update(func(tx *bolt.Tx) error {
		nb, err := tx.Bucket([]byte("networks")).CreateBucket([]byte("empty"))
		must(t, err)
		_, err = nb.CreateBucket([]byte("ips"))
		return err
	}))
	must(t, db.Update(renameNetworkMeta))
	must(t, db.View(func(tx *bolt.Tx) error {
		nb := tx.Bucket([]byte("networks")).Bucket([]byte("cbr0"))
		if nb.Bucket([]byte("meta")) != nil || string(nb.Bucket(bucketBookkeeping).Get([]byte("bootID"))) != "boot-1" {
			t.Error("cbr0's meta not moved to bookkeeping")
		}
		return nil
	}))
}

func TestMigrationsAreOrdered(t *testing.T) {
	for i, m := range migrations {
		if m.schema != uint64(i+1) || (i > 0 && m.apply == nil) || m.name == "" {
			t.Errorf("step %d: %+v", i, m)
		}
	}
	if SchemaVersion != migrations[len(migrations)-1].schema {
		t.Errorf("SchemaVersion %d", SchemaVersion)
	}
}

// Schema 3 (markLegacyIdentities): a schema-2 store's identities cannot say
// whether they were a pod's name or a stickyip.io/identity value; after the
// step every identity on record is Legacy, the keyed identity of its name
// finds it (reservation.IdentityRecords), and records without one are
// untouched.
func TestMarkLegacyIdentitiesStep(t *testing.T) {
	dir := t.TempDir()
	writeSchema1(t, dir)
	s := New(dir, time.Second)
	must(t, s.Update("cbr0", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Allocated, ContainerID: "anon", IfName: "eth0",
			AllocatedAt: time.Now().UTC()})
	}))
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { // back to schema 2, names as schema 2 wrote them
		nb := tx.Bucket(bucketNetworks).Bucket([]byte("cbr0")).Bucket(bucketIPs)
		return nb.ForEach(func(k, v []byte) error {
			r, err := decode(k, v)
			must(t, err)
			r.Identity.Legacy = false
			nv, err := json.Marshal(r)
			must(t, err)
			return nb.Put(k, nv)
		})
	}))
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, u64(2)) }))
	must(t, db.Close())

	must(t, s.View("cbr0", func(tx reservation.Txn) error {
		web, err := reservation.IdentityRecords(tx, reservation.Identity{Namespace: "default", Name: "identity:web", IfName: "eth0"})
		if err != nil || len(web) != 1 || !web[0].Identity.Legacy || web[0].ContainerID != "c1" {
			t.Errorf("identity:web after the migration: %+v %v; want the legacy record of web", web, err)
		}
		anon, err := tx.Get(netip.MustParseAddr("10.0.0.3"))
		if err != nil || anon == nil || anon.Identity.Legacy || !anon.Identity.IsZero() {
			t.Errorf("record without identity: %+v %v", anon, err)
		}
		return nil
	}))
	if v, _ := schemaOf(t, s.Path()); v != 3 {
		t.Fatalf("schema %d after the read, want 3", v)
	}
	if problems, err := s.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("migrated store: %v %v", err, problems)
	}
}

// A migration that fails leaves the store as it found it: one step's
// change (the renamed bucket) is not kept when a later step fails, the
// schema stays, and the error names the step. A record of the old store
// that does not decode fails it.
func TestFailedMigrationChangesNothing(t *testing.T) {
	dir := t.TempDir()
	writeSchema1(t, dir)
	path := filepath.Join(dir, DBFile)
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("networks")).Bucket([]byte("cbr0")).Bucket([]byte("ips")).Put(addrKey(netip.MustParseAddr("10.0.0.3")), []byte(`{"ip":`))
	}))
	must(t, db.Close())
	before, err := os.ReadFile(path)
	must(t, err)

	s := New(dir, time.Second)
	for name, call := range map[string]func() error{
		"write": func() error { return s.Update("cbr0", func(reservation.Txn) error { return nil }) },
		"read":  func() error { return s.View("cbr0", func(reservation.Txn) error { return nil }) },
	} {
		err := call()
		if !errors.Is(err, reservation.ErrCorrupt) || !strings.Contains(err.Error(), "migrating to schema 3") {
			t.Errorf("%s of a store whose migration fails: %v, want ErrCorrupt naming the step", name, err)
		}
		after, _ := os.ReadFile(path)
		if !bytes.Equal(before, after) {
			t.Fatalf("%s: the store changed although its migration failed", name)
		}
		if v, old := schemaOf(t, path); v != 1 || !old {
			t.Fatalf("%s: schema %d, old meta bucket %t; want schema 1 as it was", name, v, old)
		}
	}
}

// Every network of a schema-1 store is migrated, and every record of each:
// each keeps its bookkeeping, each identity on record becomes legacy.
func TestMigrateEveryNetworkAndRecord(t *testing.T) {
	dir := t.TempDir()
	writeSchema1Networks(t, dir, 2, "cbr0", "edge")
	s := New(dir, time.Second)
	for _, net := range []string{"cbr0", "edge"} {
		must(t, s.View(net, func(tx reservation.Txn) error {
			if boot, err := tx.Meta("bootID"); err != nil || boot != "boot-1" {
				t.Errorf("%s: bookkeeping bootID %q (%v), want boot-1", net, boot, err)
			}
			n := 0
			err := tx.ForEach(func(r *reservation.Record) error {
				n++
				if !r.Identity.Legacy {
					t.Errorf("%s: %s's identity %+v not marked legacy", net, r.IP, r.Identity)
				}
				return nil
			})
			if err != nil || n != 2 {
				t.Errorf("%s: %d records (%v), want 2", net, n, err)
			}
			return nil
		}))
	}
	if problems, err := s.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("migrated store: %v %v", err, problems)
	}
}
