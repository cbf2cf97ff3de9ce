package rebuild

import (
	"fmt"
	"time"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/reservation"
)

// Waiter is a store that says which rebuilt networks wait for the
// NodeRecord's reservations, and whether there is a store at all
// (checkpointd/ipamstore).
type Waiter interface {
	Entries() ([]reservation.Entry, error)
	Waiting() (map[string]time.Time, error)
	Missing() bool
}

// Published is the store as the placement publisher reads it: while a
// rebuilt network waits for the record's reservations, or while the node
// has no store (a new node, or one re-installed: newStore reads its entries
// first), nothing is read (an error, so the publisher skips its pass).
// Publishing the store then would remove from the record the very entries
// the store is to take back.
type Published struct{ Store Waiter }

// Entries returns the store's entries, unless a rebuilt network waits or
// there is no store.
func (p Published) Entries() ([]reservation.Entry, error) {
	if p.Store.Missing() {
		return nil, fmt.Errorf("%w: the record is not changed until the node has an IPAM store (a re-installed node's is made from its entries there)", placement.ErrNotYet)
	}
	w, err := p.Store.Waiting()
	if err != nil {
		return nil, err
	}
	if len(w) > 0 {
		return nil, fmt.Errorf("the rebuilt IPAM store waits for the NodeRecord's reservations (networks %v): the record is not changed until they are read", keys(w))
	}
	return p.Store.Entries()
}

func keys(m map[string]time.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

var _ Store = (*ipamstore.Store)(nil)
