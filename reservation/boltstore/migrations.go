package boltstore

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// migration is one step of the schema's history: apply turns a database of
// schema-1 into one of schema. Steps run in order, in the transaction that
// found the older schema, and each has its own test.
type migration struct {
	schema uint64
	name   string
	apply  func(tx *bolt.Tx) error
}

// migrations is the schema's history; its last step is SchemaVersion. A
// field added to the record JSON that older binaries may ignore without
// harm needs no step (lastIdentity on cooling records: an older binary
// ignores it and hands out a requested cooling address as it always did);
// a bump would only make older binaries refuse the store (error 102).
// Schema 1 is the first layout (see the package doc of that version): no
// step produces it.
var migrations = []migration{
	{schema: 1, name: "initial layout"},
	{schema: 2, name: "per-network bucket meta renamed bookkeeping; cooling records (ipam.reservation.reuseDelay)", apply: renameNetworkMeta},
}

// migrate runs every step after schema from and records the new schema.
func migrate(tx *bolt.Tx, from uint64) error {
	for _, m := range migrations {
		if m.schema <= from {
			continue
		}
		if err := m.apply(tx); err != nil {
			return fmt.Errorf("migrating to schema %d (%s): %w", m.schema, m.name, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(keySchema, u64(SchemaVersion))
}

// renameNetworkMeta (schema 2): every network's "meta" bucket, which shared
// its name with the top-level one, becomes "bookkeeping". Schema 2 also
// admits records in state cooling, which schema 1 binaries would refuse:
// the version bump makes them say "newer stickyip" instead.
func renameNetworkMeta(tx *bolt.Tx) error {
	oldName := []byte("meta")
	nets := tx.Bucket(bucketNetworks)
	if nets == nil {
		return fmt.Errorf("%w: bucket %q missing", reservation.ErrCorrupt, bucketNetworks)
	}
	var names [][]byte
	if err := nets.ForEachBucket(func(k []byte) error {
		names = append(names, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return err
	}
	for _, name := range names {
		nb := nets.Bucket(name)
		old := nb.Bucket(oldName)
		if old == nil {
			continue
		}
		nw, err := nb.CreateBucketIfNotExists(bucketBookkeeping)
		if err != nil {
			return err
		}
		if err := old.ForEach(func(k, v []byte) error { return nw.Put(k, v) }); err != nil {
			return err
		}
		if err := nb.DeleteBucket(oldName); err != nil {
			return err
		}
	}
	return nil
}
