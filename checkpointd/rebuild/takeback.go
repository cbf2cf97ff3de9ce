package rebuild

import (
	"fmt"
	"time"
)

// takeBack is what is known of one address of one of the node's own
// NodeRecord entries, when a store is made again: rebuilt after
// damage, or made anew on a node re-installed under the same name.
type takeBack struct {
	// Running: a sandbox on the node holds the identity now (it keeps its
	// address: nothing to reserve).
	Running bool
	// Disowned: the record was written under an earlier Node of the same
	// name (deleted and registered again): its entries are not this Node's.
	Disowned bool
	// LaterBy names another node that claimed the identity later (it ran
	// the pod since); "" when none did.
	LaterBy string
	// InRanges: one of the node's networks hands the address out.
	InRanges bool
	// InPodCIDR: the Node's current pod CIDRs hold the address, or its
	// network does not follow them (a range of its own), or they are not
	// known.
	InPodCIDR bool
	// Until is the reservation's end the entry says; zero ("-") when a
	// sandbox held the addresses when it was last published.
	Until time.Time
	// Known is the pod's own reservation duration when known (its
	// checkpoint); 0 when not.
	Known time.Duration
	// MaxDuration is the network's reservation.maxDuration.
	MaxDuration time.Duration
	// Reinstalled: a new store on a node re-installed under the same name,
	// whose entries with "-" are pods that ran there when it went away.
	// Otherwise (a damaged store rebuilt) such an entry's sandbox died
	// before the damage, at a time nothing says.
	Reinstalled bool
	// Start is when the reservation of a "-" entry starts: the node's
	// start (the first look for its store) for a re-installed node, the
	// rebuild otherwise.
	Start time.Time
	Now   time.Time
}

// decide returns until when the address is reserved again for the entry's
// identity (zero: it is not) and, when it is not, why (empty when there is
// nothing to say: the identity's sandbox holds it, or its reservation is
// over). Pure: every input is in in. The order of the rules is the order of
// the reasons: the first that applies is the one given.
//
//   - a sandbox holds the identity: nothing to reserve;
//   - the entry is not the node's own any more (Disowned), or another node
//     claimed the identity later (LaterBy): not taken back;
//   - the address is in none of the node's networks, or in a pod CIDR the
//     Node no longer has: not taken back;
//   - a reservation (Until): until its end, if that is still to come;
//   - a pod that held the address ("-"): for its own duration when known,
//     else, on a re-installed node, the network's reservation.maxDuration,
//     from Start (at most maxDuration); on a store rebuilt after damage,
//     with no known duration, not kept (its end is unknown).
func decide(in takeBack) (until time.Time, why string) {
	switch {
	case in.Running:
		return time.Time{}, ""
	case in.Disowned:
		return time.Time{}, "written under an earlier Node of this name (deleted and registered again): not this Node's"
	case in.LaterBy != "":
		return time.Time{}, fmt.Sprintf("node %s claimed the identity later (it ran the pod since)", in.LaterBy)
	case !in.InRanges:
		return time.Time{}, "in no range of the node's networks"
	case !in.InPodCIDR:
		return time.Time{}, "outside the Node's pod CIDRs"
	case !in.Until.IsZero() && !in.Now.Before(in.Until):
		return time.Time{}, ""
	case !in.Until.IsZero():
		return in.Until, ""
	}
	d := in.Known
	switch {
	case d > 0:
		d = min(d, in.MaxDuration)
	case in.Reinstalled:
		d = in.MaxDuration
	default:
		return time.Time{}, "held by a sandbox when last published, which is gone; its end is unknown and no checkpoint gives its duration: not kept"
	}
	if until = in.Start.Add(d); !in.Now.Before(until) {
		return time.Time{}, ""
	}
	return until, ""
}
