package daemon

import (
	"sync"
	"time"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/retention"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// observed is the IPAM store as the placement publisher reads it: through
// the store's Observe, which reads the store and the CNI configuration only
// when they changed since the last read, the reconcile pass's or the
// publisher's (each change is read once, by whichever asks first). The
// three questions of one publisher pass (Waiting, Entries, Holds, asked
// one after the other) share one Observe.
type observed struct {
	store *ipamstore.Store
	mu    sync.Mutex
	last  *ipamstore.View
	at    time.Time
}

// sameAsk is how long a view serves the questions of one publisher pass.
const sameAsk = time.Second

func (o *observed) view() (*ipamstore.View, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last != nil && time.Since(o.at) < sameAsk {
		return o.last, nil
	}
	v, err := o.store.Observe()
	if err != nil {
		o.last = nil
		return nil, err
	}
	o.last, o.at = v, time.Now()
	return v, nil
}

// Entries returns the records.
func (o *observed) Entries() ([]reservation.Entry, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Entries, nil
}

// Waiting returns the rebuilt networks that wait for the placement index.
func (o *observed) Waiting() (map[string]time.Time, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Waiting, nil
}

// Missing reports whether the node has no store at all (rebuild.Waiter):
// a stat, not a read.
func (o *observed) Missing() bool { return o.store.Missing() }

// Retain applies the retention follower's changes (retention.Store,
// through forFollower); the engine checks each against the record as it is
// then.
func (o *observed) Retain(network string, changes []ipam.RetentionChange) (int, error) {
	return o.store.Retain(network, changes)
}

// forFollower is the IPAM store as the retention follower reads it: the
// store's Observe at each of its passes (a read only when the store
// changed), never the view kept for a publisher pass. A DEL just before
// the follower's pass leaves a held reservation that pass must see: else
// its release waits a whole interval more, in which a pod of the name
// created again (its StatefulSet deleted and created again) takes the
// address.
func (o *observed) forFollower() retention.Store { return latest{o} }

// latest is observed as the follower reads it (forFollower).
type latest struct{ o *observed }

func (l latest) Entries() ([]reservation.Entry, error) {
	v, err := l.o.store.Observe()
	if err != nil {
		return nil, err
	}
	return v.Entries, nil
}

func (l latest) Retain(network string, changes []ipam.RetentionChange) (int, error) {
	return l.o.Retain(network, changes)
}

// holds is placement.Options.Holds.
func (o *observed) holds() (func(reservation.Entry) bool, error) {
	v, err := o.view()
	if err != nil {
		return nil, err
	}
	return v.Holds()
}
