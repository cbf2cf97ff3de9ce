package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// txn implements reservation.Txn on one network's buckets. All buckets are nil
// in a read-only view of a network that has no records yet.
type txn struct {
	ips, containers, identities, expiry, meta *bolt.Bucket
	room                                      int // the file mapping asked for (Store.Update's room)
}

// HasRoom reports whether the transaction was opened with a file mapping
// of at least n bytes: bbolt then does not move the mapping while the
// transaction writes up to n bytes (each move copies every key and value
// the transaction has touched).
func (t *txn) HasRoom(n int) bool { return t.room >= n }

var _ reservation.Txn = (*txn)(nil)

func openNetwork(tx *bolt.Tx, network string, create bool) (*txn, error) {
	if network == "" {
		return nil, fmt.Errorf("empty network name")
	}
	t := &txn{}
	if tx == nil {
		return t, nil
	}
	nets := tx.Bucket(bucketNetworks)
	if nets == nil {
		return nil, fmt.Errorf("%w: bucket %q missing", reservation.ErrCorrupt, bucketNetworks)
	}
	nb := nets.Bucket([]byte(network))
	if nb == nil {
		if !create {
			return t, nil
		}
		var err error
		if nb, err = nets.CreateBucket([]byte(network)); err != nil {
			return nil, err
		}
	}
	for _, sub := range []struct {
		name []byte
		dst  **bolt.Bucket
	}{{bucketIPs, &t.ips}, {bucketContainers, &t.containers}, {bucketIdentities, &t.identities}, {bucketExpiry, &t.expiry}, {bucketBookkeeping, &t.meta}} {
		b := nb.Bucket(sub.name)
		if b == nil && create {
			var err error
			if b, err = nb.CreateBucket(sub.name); err != nil {
				return nil, err
			}
		}
		if b == nil {
			return nil, fmt.Errorf("%w: network %q lacks bucket %q", reservation.ErrCorrupt, network, sub.name)
		}
		*sub.dst = b
	}
	return t, nil
}

func addrKey(a netip.Addr) []byte {
	k := a.As16()
	return k[:]
}

func keyAddr(k []byte) (netip.Addr, bool) {
	if len(k) != 16 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16([16]byte(k)).Unmap(), true
}

func containerPrefix(containerID, ifname string) []byte {
	return []byte(containerID + "\x00" + ifname + "\x00")
}

func identityPrefix(id reservation.Identity) []byte {
	return []byte(id.Namespace + "\x00" + id.Name + "\x00" + id.IfName + "\x00")
}

func expiryKey(r *reservation.Record) []byte {
	k := make([]byte, 8, 24)
	binary.BigEndian.PutUint64(k, uint64(max(r.ExpiresAt.UnixNano(), 0)))
	return append(k, addrKey(r.IP)...)
}

func decode(k, v []byte) (*reservation.Record, error) {
	r := &reservation.Record{}
	if err := decodeRecord(v, r); err != nil {
		return nil, fmt.Errorf("%w: record %x: %v", reservation.ErrCorrupt, k, err)
	}
	if a, ok := keyAddr(k); !ok || a != r.IP {
		return nil, fmt.Errorf("%w: record under key %x claims IP %s", reservation.ErrCorrupt, k, r.IP)
	}
	return r, nil
}

func (t *txn) Get(ip netip.Addr) (*reservation.Record, error) {
	if t.ips == nil {
		return nil, nil
	}
	k := addrKey(ip)
	v := t.ips.Get(k)
	if v == nil {
		return nil, nil
	}
	return decode(k, v)
}

func (t *txn) Put(r *reservation.Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := t.Delete(r.IP); err != nil {
		return err
	}
	v, err := encodeRecord(r)
	if err != nil {
		return err
	}
	k := addrKey(r.IP)
	if err := t.ips.Put(k, v); err != nil {
		return err
	}
	for _, ik := range indexKeys(r) {
		if err := ik.b(t).Put(ik.key, nil); err != nil {
			return err
		}
	}
	return nil
}

// PutAll puts rs, each bucket written in key order: bbolt keeps a
// transaction's changes in memory nodes until commit, and a key inserted
// before others in a node moves all of them, so 65,000 records inserted in
// hash order cost seconds and in key order tens of milliseconds.
func (t *txn) PutAll(rs []*reservation.Record) error {
	type kv struct{ key, value []byte }
	for _, r := range rs {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	values, err := encodeAll(rs)
	if err != nil {
		return err
	}
	puts := make([]kv, len(rs))
	for i, r := range rs {
		puts[i] = kv{addrKey(r.IP), values[i]}
	}
	byKey := func(x, y kv) int { return bytes.Compare(x.key, y.key) }
	if !slices.IsSortedFunc(puts, byKey) {
		slices.SortFunc(puts, byKey)
	}
	for i := 1; i < len(puts); i++ {
		if bytes.Equal(puts[i-1].key, puts[i].key) {
			a, _ := keyAddr(puts[i].key)
			return fmt.Errorf("PutAll: %s given twice", a)
		}
	}
	// Records already there give up their index entries first, as Put's
	// do; a network that holds nothing yet (an import's) has none to look up.
	if k, _ := t.ips.Cursor().First(); k != nil {
		for _, r := range rs {
			if err := t.Delete(r.IP); err != nil {
				return err
			}
		}
	}
	byBucket := map[*bolt.Bucket][]kv{t.ips: puts}
	for _, r := range rs {
		for _, ik := range indexKeys(r) {
			b := ik.b(t)
			byBucket[b] = append(byBucket[b], kv{ik.key, nil})
		}
	}
	for b, puts := range byBucket {
		// Keys in order: pages filled whole, not half (bbolt's default,
		// for keys that arrive anywhere), so a bulk load writes half the
		// pages.
		b.FillPercent = 1
		if !slices.IsSortedFunc(puts, byKey) {
			slices.SortFunc(puts, byKey)
		}
		for _, p := range puts {
			if err := b.Put(p.key, p.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// encodeAll encodes rs as Put stores them, spread over the node's cores
// for a bulk load (65,000 records of a /16 import).
func encodeAll(rs []*reservation.Record) ([][]byte, error) {
	values := make([][]byte, len(rs))
	workers := min(runtime.GOMAXPROCS(0), max(len(rs)/encodeChunk, 1))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(rs); i += workers {
				if values[i], errs[w] = encodeRecord(rs[i]); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return values, errors.Join(errs...)
}

// encodeChunk is how many records make encoding on one more core worth it.
const encodeChunk = 1024

type indexKey struct {
	b   func(*txn) *bolt.Bucket
	key []byte
}

// indexKeys lists the index entries a record owns.
func indexKeys(r *reservation.Record) []indexKey {
	var ks []indexKey
	k := addrKey(r.IP)
	if r.State == reservation.Allocated {
		ks = append(ks, indexKey{func(t *txn) *bolt.Bucket { return t.containers }, append(containerPrefix(r.ContainerID, r.IfName), k...)})
	}
	if !r.Identity.IsZero() {
		ks = append(ks, indexKey{func(t *txn) *bolt.Bucket { return t.identities }, append(identityPrefix(r.Identity), k...)})
	}
	if r.Timed() {
		ks = append(ks, indexKey{func(t *txn) *bolt.Bucket { return t.expiry }, expiryKey(r)})
	}
	return ks
}

func (t *txn) Delete(ip netip.Addr) error {
	old, err := t.Get(ip)
	if err != nil || old == nil {
		return err
	}
	for _, ik := range indexKeys(old) {
		if err := ik.b(t).Delete(ik.key); err != nil {
			return err
		}
	}
	return t.ips.Delete(addrKey(ip))
}

// byPrefix loads the records whose index keys in b start with prefix. Every
// index key ends with the record's 16-byte address.
func (t *txn) byPrefix(b *bolt.Bucket, prefix []byte) ([]*reservation.Record, error) {
	if b == nil {
		return nil, nil
	}
	var out []*reservation.Record
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		a, ok := keyAddr(k[max(len(prefix), len(k)-16):])
		if !ok {
			return nil, fmt.Errorf("%w: bad index key %q", reservation.ErrCorrupt, k)
		}
		r, err := t.Get(a)
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, fmt.Errorf("%w: index entry %q points at missing record %s", reservation.ErrCorrupt, k, a)
		}
		out = append(out, r)
	}
	return out, nil
}

func (t *txn) ByContainer(containerID, ifname string) ([]*reservation.Record, error) {
	return t.byPrefix(t.containers, containerPrefix(containerID, ifname))
}

func (t *txn) ByIdentity(id reservation.Identity) ([]*reservation.Record, error) {
	return t.byPrefix(t.identities, identityPrefix(id))
}

func (t *txn) ByNamespace(namespace string) ([]*reservation.Record, error) {
	return t.byPrefix(t.identities, []byte(namespace+"\x00"))
}

func (t *txn) UsedFrom(from netip.Addr, fn func(netip.Addr) bool) error {
	if t.ips == nil {
		return nil
	}
	c := t.ips.Cursor()
	for k, _ := c.Seek(addrKey(from)); k != nil; k, _ = c.Next() {
		a, ok := keyAddr(k)
		if !ok {
			return fmt.Errorf("%w: bad key %x in ips", reservation.ErrCorrupt, k)
		}
		if a.Is4() != from.Is4() || !fn(a) {
			return nil
		}
	}
	return nil
}

func (t *txn) ByExpiry(fn func(*reservation.Record) bool) error {
	if t.expiry == nil {
		return nil
	}
	c := t.expiry.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		a, ok := keyAddr(k[min(8, len(k)):])
		if !ok || len(k) != 24 {
			return fmt.Errorf("%w: bad expiry key %x", reservation.ErrCorrupt, k)
		}
		r, err := t.Get(a)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("%w: expiry entry for missing record %s", reservation.ErrCorrupt, a)
		}
		if !fn(r) {
			return nil
		}
	}
	return nil
}

func (t *txn) ForEach(fn func(*reservation.Record) error) error {
	if t.ips == nil {
		return nil
	}
	return t.ips.ForEach(func(k, v []byte) error {
		r, err := decode(k, v)
		if err != nil {
			return err
		}
		return fn(r)
	})
}

func (t *txn) Meta(key string) (string, error) {
	if t.meta == nil {
		return "", nil
	}
	return string(t.meta.Get([]byte(key))), nil
}

func (t *txn) SetMeta(key, value string) error {
	return t.meta.Put([]byte(key), []byte(value))
}
