// Package entry is the placement index's entry: what a node writes for an
// identity it holds, "<node> <pod> <since> <ip>[,<ip>…]", the form the
// placement policy (deploy/placement) splits. It needs nothing of
// Kubernetes, so that fuzzing its parser instruments no API client.
package entry

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// timeFormat is how Since is written: RFC 3339 in UTC, to the millisecond
// (two claims of one identity a second apart must compare).
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// Hold is one entry of a shard: the node holding an identity's addresses.
// It changes only when a pod of the identity gets its addresses (ADD):
// whether that pod still runs, and how long the reservation after it
// lasts, are the node's business, so a DEL writes nothing.
type Hold struct {
	Node string   // the node that holds the addresses
	Pod  string   // the pod that holds, or last held, them there
	IPs  []string // sorted
	// Since is when the pod got the addresses on the node (its ADD): of two
	// nodes holding one identity, the later claim wins.
	Since time.Time
}

// Equal reports whether two holds say the same, times to the millisecond
// (as they are written).
func (h Hold) Equal(o Hold) bool {
	return h.Node == o.Node && h.Pod == o.Pod && slices.Equal(h.IPs, o.IPs) &&
		h.Since.Truncate(time.Millisecond).Equal(o.Since.Truncate(time.Millisecond))
}

// Parse reads an entry.
func Parse(v string) (Hold, error) {
	f := strings.Split(v, " ")
	if len(f) != 4 || f[0] == "" || f[1] == "" || f[3] == "" {
		return Hold{}, fmt.Errorf("entry %q: want \"<node> <pod> <since> <ip>[,<ip>…]\"", v)
	}
	since, err := time.Parse(time.RFC3339Nano, f[2])
	if err != nil {
		return Hold{}, fmt.Errorf("entry %q: since: %w", v, err)
	}
	return Hold{Node: f[0], Pod: f[1], Since: since, IPs: strings.Split(f[3], ",")}, nil
}

// String renders h as an entry.
func (h Hold) String() string {
	return strings.Join([]string{h.Node, h.Pod, h.Since.UTC().Format(timeFormat), strings.Join(h.IPs, ",")}, " ")
}
