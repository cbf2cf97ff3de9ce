package reservation

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/stickyip/stickyip/contract"
)

// Errors a store reports. They are turned into CNI error codes at the plugin edge.
var (
	// ErrCorrupt: the database cannot be read (corrupt, truncated, not a database).
	ErrCorrupt = errors.New("store is corrupt or unreadable")
	// ErrFutureSchema: the database was written by a newer stickyip.
	ErrFutureSchema = errors.New("store was written by a newer stickyip")
	// ErrLocked: another process held the store longer than the lock timeout.
	ErrLocked = errors.New("store is locked by another process")
	// ErrLost: the database file is missing from a data directory that had
	// one (its creation mark is there): the node's records are gone while
	// its sandboxes may still hold addresses, so no call may start over
	// from an empty store (checkpointd rebuilds it).
	ErrLost = errors.New("store is missing but this node had one")
	// ErrAwaiting: the data directory has no store yet, and a new one is
	// held back while checkpointd reads what the cluster holds for the node
	// (a node re-installed under the same name takes its reservations back
	// from its placement entries): no address is handed out meanwhile.
	ErrAwaiting = errors.New("new store waits for checkpointd to read what the cluster holds for this node")
	// ErrIO: the data directory or database file could not be read or written.
	ErrIO = errors.New("store I/O failure")
	// ErrNoChange, returned by an Update's function, ends the transaction
	// without committing (nothing to sync) and makes Update return nil.
	ErrNoChange = errors.New("nothing to change")
)

// NeedRoom, returned by an Update's function, asks the store to run it
// again, once, in a transaction with room for Bytes of new records, which
// the store can make cheaper up front than as the transaction grows (a
// bulk load: an import of host-local's data).
type NeedRoom struct{ Bytes int }

func (e *NeedRoom) Error() string {
	return fmt.Sprintf("the transaction needs room for %d bytes of new records", e.Bytes)
}

// Roomy is a Txn that can tell whether it has room for n bytes of new
// records (see NeedRoom); a Txn that is not has room for anything.
type Roomy interface {
	HasRoom(n int) bool
}

// Txn is one transaction on one network's records. Every CNI call runs in
// exactly one Txn; implementations keep the indexes (by container, by identity,
// by expiry) consistent with the records. The iterating methods must not be
// given callbacks that change the Txn: collect first, then change.
type Txn interface {
	// Get returns the record for ip, or nil.
	Get(ip netip.Addr) (*Record, error)
	// Put inserts or replaces the record for r.IP.
	Put(r *Record) error
	// PutAll puts every record, as Put does one by one, for bulk loads (an
	// import): it may write each index in key order, which bbolt appends
	// instead of shifting. A record that fails validation fails the call.
	PutAll(rs []*Record) error
	// Delete removes the record for ip; deleting a missing record is not an error.
	Delete(ip netip.Addr) error
	// ByContainer returns the records allocated to (containerID, ifname).
	// An empty ifname matches records whose ifname is empty (old host-local imports).
	ByContainer(containerID, ifname string) ([]*Record, error)
	// ByIdentity returns the records (allocated or reserved) of an identity.
	ByIdentity(id Identity) ([]*Record, error)
	// ByNamespace returns the records (allocated or reserved) whose identity
	// is in namespace, reading no other record.
	ByNamespace(namespace string) ([]*Record, error)
	// UsedFrom calls fn with every IP that has a record, in ascending order,
	// starting at from (inclusive) and staying in from's address family, until
	// fn returns false.
	UsedFrom(from netip.Addr, fn func(netip.Addr) bool) error
	// ByExpiry calls fn with reserved and cooling records in ascending expiry
	// order until fn returns false.
	ByExpiry(fn func(*Record) bool) error
	// ForEach calls fn with every record in IP order.
	ForEach(fn func(*Record) error) error
	// Meta reads a per-network value ("" when unset); SetMeta writes one.
	Meta(key string) (string, error)
	SetMeta(key, value string) error
}

// IdentityRecords returns the records (allocated or reserved) of id:
// ByIdentity, and, for a keyed identity (contract.KeyedIdentity), the Legacy
// records of its key, which answer to both forms (Identity.Same).
func IdentityRecords(tx Txn, id Identity) ([]*Record, error) {
	out, err := tx.ByIdentity(id)
	if err != nil {
		return nil, err
	}
	key, keyed := contract.IdentityKey(id.Name)
	if !keyed {
		return out, nil
	}
	bare := id
	bare.Name = key
	old, err := tx.ByIdentity(bare)
	if err != nil {
		return nil, err
	}
	for _, r := range old {
		if r.Identity.Legacy {
			out = append(out, r)
		}
	}
	return out, nil
}

// PodRecords returns the records (allocated or reserved) of the identity
// namespace/name (a pod name or a keyed identity, see Identity.Answers) on
// any interface. It reads every record of the network; it is
// for operator actions, not for the CNI path.
func PodRecords(tx Txn, namespace, name string) ([]*Record, error) {
	var out []*Record
	err := tx.ForEach(func(r *Record) error {
		if r.Identity.Answers(namespace, name) {
			out = append(out, r)
		}
		return nil
	})
	return out, err
}
