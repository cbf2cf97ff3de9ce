package rebuild

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// restorer turns checkpoints and index entries into reservations of the
// networks, for the identities no sandbox holds.
type restorer struct {
	confs   map[string]*ipam.Config
	names   []string
	now     time.Time
	running map[reservation.Identity]bool // identities (ifname eth0) a sandbox holds
	ifnames map[string]string             // each network's interface
	notes   []string
	// podCIDRs are the Node's current pod CIDRs (nil: unknown).
	podCIDRs []netip.Prefix
	// reinstalled: a new store on a node re-installed under the same name
	// (takeBack.Reinstalled), whose "-" entries' reservations run from
	// start.
	reinstalled bool
	start       time.Time
}

func newRestorer(confs map[string]*ipam.Config, h holders, now time.Time) *restorer {
	r := &restorer{confs: confs, now: now, running: h.running, ifnames: h.ifnames, start: now}
	for n := range confs {
		r.names = append(r.names, n)
		if r.ifnames[n] == "" {
			r.ifnames[n] = defaultIfName
		}
	}
	slices.Sort(r.names)
	return r
}

// holders are the identities sandboxes hold, and each network's most used
// interface (the one a restored reservation is for: the record and the
// checkpoints do not name it).
type holders struct {
	running map[reservation.Identity]bool
	ifnames map[string]string
}

// holding adds what one sandbox holds in network n.
func (h *holders) holding(n string, id reservation.Identity, count map[string]map[string]int, ifname string) {
	if count[n] == nil {
		count[n] = map[string]int{}
	}
	count[n][ifname]++
	if !id.IsZero() {
		h.running[id] = true
	}
}

func (h *holders) pickIfnames(count map[string]map[string]int) {
	for n, c := range count {
		best := defaultIfName
		for ifname, k := range c {
			if k > c[best] || (k == c[best] && ifname < best) {
				best = ifname
			}
		}
		h.ifnames[n] = best
	}
}

// runningOf returns what the plan's attachments hold.
func runningOf(confs map[string]*ipam.Config, plan Plan) holders {
	h := holders{running: map[reservation.Identity]bool{}, ifnames: map[string]string{}}
	count := map[string]map[string]int{}
	for n, nr := range plan.Networks {
		for _, a := range nr.Attachments {
			id := identityOf(confs[n], a.Args, a.Annotations)
			if !id.IsZero() {
				id.IfName = a.IfName
			}
			h.holding(n, id, count, a.IfName)
		}
	}
	h.pickIfnames(count)
	return h
}

// storeHolders returns what the allocations of a store hold.
func storeHolders(entries []reservation.Entry) holders {
	h := holders{running: map[reservation.Identity]bool{}, ifnames: map[string]string{}}
	count := map[string]map[string]int{}
	for _, e := range entries {
		if e.State == reservation.Allocated {
			h.holding(e.Network, e.Identity, count, e.IfName)
		}
	}
	h.pickIfnames(count)
	return h
}

// identityOf is the pod's identity in a network by the plugin's rule
// (ipam.Config.Identity), without the interface; zero when it has none.
func identityOf(c *ipam.Config, args ipam.PodArgs, ann map[string]string) reservation.Identity {
	cc := *c
	cc.Args, cc.Annotations = args, ann
	who, err := cc.Identity()
	if err != nil || who.IsZero() {
		return reservation.Identity{}
	}
	return reservation.Identity{Namespace: who.Namespace, Name: who.Name}
}

// fromCheckpoint reserves, for a saved pod no sandbox runs, the addresses
// it had when saved, for its reservation duration from now: the checkpoint
// says the pod is to come back to this node (it is released only once the
// API server has said for the grace period that the pod is gone), so no
// other pod may take them meanwhile. An index entry of the same
// reservation, when read, ends it at its own (earlier) end.
func (r *restorer) fromCheckpoint(rec *checkpoint.Record) map[string][]ipam.Restored {
	out := map[string][]ipam.Restored{}
	p := rec.Pod
	args := ipam.PodArgs{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	for _, s := range rec.IPs {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			r.notes = append(r.notes, fmt.Sprintf("checkpoint of %s: address %q does not parse", rec.ID(), contract.Clip(s, contract.ClipLen)))
			continue
		}
		n := r.networkOf(ip)
		if n == "" {
			continue
		}
		id := identityOf(r.confs[n], args, p.Annotations)
		id.IfName = r.ifnames[n]
		if id.Namespace == "" || r.running[id] {
			continue
		}
		c := *r.confs[n]
		c.Args, c.Annotations = args, p.Annotations
		d, _, _, err := c.ReservationFor()
		if err != nil || d <= 0 {
			continue // not sticky: nothing to keep
		}
		out[n] = append(out[n], ipam.Restored{Identity: id, PodName: p.Name, UID: string(p.UID), IPs: []netip.Addr{ip}, Until: r.now.Add(d),
			From: "checkpoint " + rec.ID().String()})
	}
	return out
}

// heldUntil stands for "no end" in the decision of a held entry: it is
// taken back by the same rules as any reservation that has not ended.
var heldUntil = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// fromIndex reserves the addresses of an index entry that decide takes
// back (every rule is there), for its identity, until the end it gives,
// with the entry's own ADD time (the publisher then sees the same claim).
// dur holds the durations checkpoints give. An entry its StatefulSet kept
// (Held) is put back held, following the StatefulSet the controller
// named for it (or the one its name gives): the controller decides its end.
func (r *restorer) fromIndex(e IndexEntry, dur map[reservation.Identity]time.Duration) map[string][]ipam.Restored {
	out := map[string][]ipam.Restored{}
	for _, ip := range e.IPs {
		n := r.networkOf(ip)
		id := reservation.Identity{Namespace: e.Namespace, Name: e.Identity, IfName: r.ifnames[n]}
		until := e.Until
		if e.Held {
			until = heldUntil
		}
		in := takeBack{Running: n != "" && r.running[id], Disowned: e.Disowned, LaterBy: e.LaterBy, InRanges: n != "",
			InPodCIDR: n == "" || r.inPodCIDR(n, ip), Until: until, Known: dur[reservation.Identity{Namespace: e.Namespace, Name: e.Identity}],
			Reinstalled: r.reinstalled, Start: r.start, Now: r.now}
		if n != "" {
			in.MaxDuration = r.confs[n].Reservation.MaxDuration
		}
		until, why := decide(in)
		if until.IsZero() {
			if why != "" {
				r.notes = append(r.notes, fmt.Sprintf("index entry %s/%s %s: %s", e.Namespace, e.Identity, ip, why))
			}
			continue
		}
		if e.Held {
			// Kept by its StatefulSet: back as held, its own duration the
			// pod's (from a checkpoint) or the longest the network allows.
			d := dur[reservation.Identity{Namespace: e.Namespace, Name: e.Identity}]
			if d <= 0 {
				d = r.confs[n].Reservation.MaxDuration
			}
			out[n] = append(out[n], ipam.Restored{Identity: id, PodName: e.Pod, UID: e.PodUID, IPs: []netip.Addr{ip}, Retained: true, Duration: d, Since: e.Since,
				StatefulSet: e.StatefulSet, From: "NodeRecord, kept by its StatefulSet"})
			continue
		}
		out[n] = append(out[n], ipam.Restored{Identity: id, PodName: e.Pod, UID: e.PodUID, IPs: []netip.Addr{ip}, Until: until, Since: e.Since,
			From: "NodeRecord"})
	}
	return out
}

// inPodCIDR reports whether ip, an address of network n, is in one of the
// Node's current pod CIDRs, or needs not be: the pod CIDRs are unknown, or
// none of them holds n's ranges (a network with a range of its own).
func (r *restorer) inPodCIDR(n string, ip netip.Addr) bool {
	if len(r.podCIDRs) == 0 || slices.ContainsFunc(r.podCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return true
	}
	for _, rs := range r.confs[n].Ranges {
		for _, rg := range rs {
			start, ok := netip.AddrFromSlice(rg.Subnet.IP)
			if ok && slices.ContainsFunc(r.podCIDRs, func(p netip.Prefix) bool { return p.Contains(start.Unmap()) }) {
				return false // the network follows the pod CIDRs, and ip is in none of them
			}
		}
	}
	return true
}

// durations returns the reservation duration each checkpointed pod's
// identity asks for (by the first network's rules that has one).
func (r *restorer) durations(recs []*checkpoint.Record) map[reservation.Identity]time.Duration {
	out := map[reservation.Identity]time.Duration{}
	for _, rec := range recs {
		for _, n := range r.names {
			c := *r.confs[n]
			c.Args = ipam.PodArgs{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name, UID: string(rec.Pod.UID)}
			c.Annotations = rec.Pod.Annotations
			id := identityOf(r.confs[n], c.Args, c.Annotations)
			if d, _, _, err := c.ReservationFor(); err == nil && d > 0 && id.Namespace != "" {
				out[id] = d
				break
			}
		}
	}
	return out
}

func (r *restorer) networkOf(ip netip.Addr) string {
	p := planner{confs: r.confs, names: r.names}
	return p.networkOf(ip)
}

// restoreInto puts into plan's networks the reservations the index's
// entries (none when nil) and the checkpoints give back.
func (r *restorer) restoreInto(plan Plan, index []IndexEntry, checkpoints []*checkpoint.Record) {
	restored := map[string][]ipam.Restored{}
	dur := r.durations(checkpoints)
	for _, e := range index {
		merge(restored, r.fromIndex(e, dur))
	}
	for _, rec := range checkpoints {
		merge(restored, r.fromCheckpoint(rec))
	}
	for n, rs := range restored {
		nr := plan.Networks[n]
		nr.Restored = rs
		plan.Networks[n] = nr
	}
}

// merge appends b's reservations to a's.
func merge(a, b map[string][]ipam.Restored) {
	for n, rs := range b {
		a[n] = append(a[n], rs...)
	}
}
