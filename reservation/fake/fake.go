// Package fake is an in-memory reservation store for engine tests: the same
// transactional behaviour as the bbolt store (a failed Update changes nothing),
// no disk.
package fake

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/stickyip/stickyip/reservation"
)

// Store holds the records of many networks in memory.
type Store struct {
	nets map[string]map[string]string                 // network → meta
	recs map[string]map[netip.Addr]reservation.Record // network → records
}

// New returns an empty store.
func New() *Store {
	return &Store{nets: map[string]map[string]string{}, recs: map[string]map[netip.Addr]reservation.Record{}}
}

// Update runs fn on a copy of network's state and keeps the copy only when fn succeeds.
func (s *Store) Update(network string, fn func(reservation.Txn) error) error {
	t := &Txn{recs: maps.Clone(s.recs[network]), meta: maps.Clone(s.nets[network])}
	if t.recs == nil {
		t.recs = map[netip.Addr]reservation.Record{}
	}
	if t.meta == nil {
		t.meta = map[string]string{}
	}
	if err := fn(t); err != nil {
		if errors.Is(err, reservation.ErrNoChange) {
			return nil
		}
		return err
	}
	s.recs[network], s.nets[network] = t.recs, t.meta
	return nil
}

// View runs fn on network's state; changes it makes are dropped.
func (s *Store) View(network string, fn func(reservation.Txn) error) error {
	err := s.Update(network, func(t reservation.Txn) error {
		if err := fn(t); err != nil {
			return err
		}
		return errDiscard
	})
	if err == errDiscard {
		return nil
	}
	return err
}

type discard struct{}

func (discard) Error() string { return "discard" }

var errDiscard error = discard{}

// Txn is the fake transaction; records are stored by value so callers cannot
// change them behind the store's back.
type Txn struct {
	recs map[netip.Addr]reservation.Record
	meta map[string]string
}

func (t *Txn) sorted() []reservation.Record {
	out := slices.Collect(maps.Values(t.recs))
	slices.SortFunc(out, func(a, b reservation.Record) int { return a.IP.Compare(b.IP) })
	return out
}

func clone(r reservation.Record) *reservation.Record { return &r }

// Get implements reservation.Txn.
func (t *Txn) Get(ip netip.Addr) (*reservation.Record, error) {
	if r, ok := t.recs[ip]; ok {
		return clone(r), nil
	}
	return nil, nil
}

// Put implements reservation.Txn.
// PutAll puts every record, in order (an in-memory store has no page order to respect).
func (t *Txn) PutAll(rs []*reservation.Record) error {
	seen := map[netip.Addr]bool{}
	for _, r := range rs {
		if seen[r.IP] {
			return fmt.Errorf("PutAll: %s given twice", r.IP)
		}
		seen[r.IP] = true
		if err := t.Put(r); err != nil {
			return err
		}
	}
	return nil
}

func (t *Txn) Put(r *reservation.Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	t.recs[r.IP] = *r
	return nil
}

// Delete implements reservation.Txn.
func (t *Txn) Delete(ip netip.Addr) error {
	delete(t.recs, ip)
	return nil
}

func (t *Txn) filter(keep func(reservation.Record) bool) []*reservation.Record {
	var out []*reservation.Record
	for _, r := range t.sorted() {
		if keep(r) {
			out = append(out, clone(r))
		}
	}
	return out
}

// ByContainer implements reservation.Txn.
func (t *Txn) ByContainer(containerID, ifname string) ([]*reservation.Record, error) {
	return t.filter(func(r reservation.Record) bool {
		return r.State == reservation.Allocated && r.ContainerID == containerID && r.IfName == ifname
	}), nil
}

// ByIdentity implements reservation.Txn.
func (t *Txn) ByIdentity(id reservation.Identity) ([]*reservation.Record, error) {
	return t.filter(func(r reservation.Record) bool {
		return !r.Identity.IsZero() && r.Identity.Namespace == id.Namespace && r.Identity.Name == id.Name && r.Identity.IfName == id.IfName
	}), nil
}

// ByNamespace implements reservation.Txn.
func (t *Txn) ByNamespace(namespace string) ([]*reservation.Record, error) {
	return t.filter(func(r reservation.Record) bool { return !r.Identity.IsZero() && r.Identity.Namespace == namespace }), nil
}

// UsedFrom implements reservation.Txn.
func (t *Txn) UsedFrom(from netip.Addr, fn func(netip.Addr) bool) error {
	for _, r := range t.sorted() {
		if r.IP.Less(from) || r.IP.Is4() != from.Is4() {
			continue
		}
		if !fn(r.IP) {
			return nil
		}
	}
	return nil
}

// ByExpiry implements reservation.Txn.
func (t *Txn) ByExpiry(fn func(*reservation.Record) bool) error {
	res := t.filter(func(r reservation.Record) bool { return r.Timed() })
	slices.SortStableFunc(res, func(a, b *reservation.Record) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), a.IP.Compare(b.IP))
	})
	for _, r := range res {
		if !fn(r) {
			return nil
		}
	}
	return nil
}

// ForEach implements reservation.Txn.
func (t *Txn) ForEach(fn func(*reservation.Record) error) error {
	for _, r := range t.sorted() {
		if err := fn(clone(r)); err != nil {
			return err
		}
	}
	return nil
}

// Meta implements reservation.Txn.
func (t *Txn) Meta(key string) (string, error) { return t.meta[key], nil }

// SetMeta implements reservation.Txn.
func (t *Txn) SetMeta(key, value string) error {
	t.meta[key] = strings.Clone(value)
	return nil
}
