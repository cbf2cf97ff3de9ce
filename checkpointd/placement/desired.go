package placement

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// Line is one entry of a node's value in a shard (package entry: its form
// and parser).
type Line = entry.Line

// Key names an identity in a namespace.
type Key struct{ Namespace, Identity string }

// Desired returns the entries node should have, by identity: one per
// identity (namespace/name) holding, in any network and on any interface,
// an allocation with a reservation duration or a reservation that has not
// expired at now (one its StatefulSet keeps never expires: its end is
// entry.Retained). Allocations without a duration, cooling addresses and
// anonymous records are not sticky. holds, when set, says which addresses
// the node holds now (in its network's ranges, in no pod CIDR the node no
// longer has): the others are never published (a node registered again
// with another podCIDR), and an identity left with none has no entry. The
// lines have no Seq: a claim gets it when written.
func Desired(node string, entries []reservation.Entry, now time.Time, holds func(reservation.Entry) bool) map[Key]Line {
	out := map[Key]Line{}
	running := map[Key]bool{}
	for _, e := range entries {
		if e.Identity.IsZero() {
			continue
		}
		switch {
		case e.State == reservation.Allocated && e.Duration > 0:
		case e.State == reservation.Reserved && !e.Expired(now):
		default:
			continue
		}
		if holds != nil && !holds(e) {
			continue
		}
		id, pod := published(node, e.Record)
		k := Key{e.Identity.Namespace, id}
		l, seen := out[k]
		if !seen {
			l = Line{Identity: id}
		}
		l.IPs = append(l.IPs, e.IP.String())
		if !seen || e.AllocatedAt.After(l.Since) {
			l.Since, l.Pod = e.AllocatedAt, pod
		}
		switch {
		case e.State == reservation.Allocated:
			running[k] = true
		case e.Held(): // no time ends it: the entry keeps counting as long as its StatefulSet keeps it
			l.Until = entry.Retained
		case e.ExpiresAt.After(l.Until):
			l.Until = e.ExpiresAt
		}
		out[k] = l
	}
	for k, l := range out {
		l.IPs = entry.SortIPs(l.IPs)
		if running[k] {
			l.Until = time.Time{}
		}
		out[k] = l
	}
	return out
}

// published returns the identity and pod a record is published as: a
// pod-name identity names itself; a keyed one (identity:<key>) the pod that
// holds it. A record of an older stickyip (Legacy) does not say which its
// name was: one whose pod had another name than the identity, but not the
// name of a restored copy of it (<name>-<node>), was a key's.
func published(node string, r *reservation.Record) (identity, pod string) {
	id := r.Identity.Name
	if _, keyed := contract.IdentityKey(id); keyed {
		return id, r.PodName
	}
	if r.Identity.Legacy && r.PodName != "" && r.PodName != id && r.PodName != id+"-"+node {
		return contract.KeyedIdentity(id), r.PodName
	}
	return id, id
}

// fit returns want without the entries that would make the node's value
// longer than entry.MaxValueLen: running pods' first, then the latest
// reservations. What is left out is counted and logged.
func (p *Publisher) fit(ref shardRef, want map[string]Line) map[string]Line {
	ids := slices.SortedFunc(maps.Keys(want), func(a, b string) int {
		la, lb := want[a], want[b]
		if la.Running() != lb.Running() {
			if la.Running() {
				return -1
			}
			return 1
		}
		return lb.Since.Compare(la.Since)
	})
	out := map[string]Line{}
	size := -1
	for _, id := range ids {
		l := want[id]
		l.Seq = 1e18 - 1 // the longest a seq can be
		n := 1 + len(l.String())
		if size+n > entry.MaxValueLen {
			p.fail("full", ref.Namespace+"/"+ref.Name, fmt.Errorf("%d of the node's %d entries fit in one shard (%d characters); the others are not published",
				len(out), len(want), entry.MaxValueLen))
			return out
		}
		size += n
		out[id] = want[id]
	}
	return out
}
