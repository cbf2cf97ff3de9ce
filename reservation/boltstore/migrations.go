package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
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
	{schema: 3, name: "identities recorded before keyed identities marked legacy", apply: markLegacyIdentities},
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

// markLegacyIdentities (schema 3): schema 3 tells a pod name from a
// stickyip.io/identity value (contract.KeyedIdentity); a record written
// before cannot say which of the two its name was, so every identity on
// record (and every cooling record's last identity) is marked Legacy, which
// answers to both until an ADD takes the record over or it expires: an
// upgrade loses no reservation. The names, and so the index keys, stay.
// Schema 2 binaries would take keyed names for pod names: the version bump
// makes them refuse the store instead.
func markLegacyIdentities(tx *bolt.Tx) error {
	nets := tx.Bucket(bucketNetworks)
	if nets == nil {
		return fmt.Errorf("%w: bucket %q missing", reservation.ErrCorrupt, bucketNetworks)
	}
	return nets.ForEachBucket(func(name []byte) error {
		ips := nets.Bucket(name).Bucket(bucketIPs)
		if ips == nil {
			return nil
		}
		type kv struct{ k, v []byte }
		var marked []kv
		err := ips.ForEach(func(k, v []byte) error {
			r, err := decode(k, v)
			if err != nil {
				return err
			}
			if r.Identity.IsZero() && r.LastIdentity.IsZero() {
				return nil
			}
			r.Identity.Legacy = !r.Identity.IsZero()
			r.LastIdentity.Legacy = !r.LastIdentity.IsZero()
			nv, err := json.Marshal(r)
			if err != nil {
				return err
			}
			marked = append(marked, kv{append([]byte(nil), k...), nv})
			return nil
		})
		if err != nil {
			return err
		}
		for _, m := range marked { // not during ForEach: a put may move the cursor's page
			if err := ips.Put(m.k, m.v); err != nil {
				return err
			}
		}
		return nil
	})
}

// errOlderSchema is returned by a read-only checkSchema on a store that a
// write must upgrade first (see view).
var errOlderSchema = errors.New("store has an older schema")

func checkSchema(tx *bolt.Tx, writable bool) error {
	path := tx.DB().Path()
	v, ok := storedSchema(tx)
	if !ok {
		return fmt.Errorf("%w: %s: no schema version (not a stickyip database?)", reservation.ErrCorrupt, path)
	}
	switch {
	case v > SchemaVersion:
		return fmt.Errorf("%w: %s: schema %d, this binary understands up to %d; upgrade stickyip", reservation.ErrFutureSchema, path, v, SchemaVersion)
	case v == 0:
		return fmt.Errorf("%w: %s: schema version 0", reservation.ErrCorrupt, path)
	case v < SchemaVersion && !writable:
		return errOlderSchema
	case v < SchemaVersion:
		return migrate(tx, v)
	}
	return nil
}

// storedSchema returns the schema version tx's database records; ok is
// false when it records none.
func storedSchema(tx *bolt.Tx) (v uint64, ok bool) {
	m := tx.Bucket(bucketMeta)
	if m == nil || len(m.Get(keySchema)) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(m.Get(keySchema)), true
}
