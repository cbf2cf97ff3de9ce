package placement

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

// Desired returns the entries node should publish, sorted by namespace and
// identity: one per identity (namespace/name) holding, in any network and
// on any interface, an allocation with a reservation duration or a
// reservation that has not expired at now (one its StatefulSet keeps never
// expires: Held). Allocations without a duration, cooling addresses and
// anonymous records are not sticky. holds, when set, says which addresses
// the node holds now (in its network's ranges, in no pod CIDR the node no
// longer has): the others are never published, and an identity left with
// none has no entry. Times are whole seconds, as the API stores them, so
// that an entry read back compares equal. At most placementv1.MaxEntries
// are returned (fit); dropped counts the rest.
func Desired(node string, entries []reservation.Entry, now time.Time, holds func(reservation.Entry) bool) (out []placementv1.Entry, dropped int) {
	byKey := map[[2]string]*placementv1.Entry{}
	running := map[[2]string]bool{}
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
		k := [2]string{e.Identity.Namespace, id}
		p := byKey[k]
		if p == nil {
			p = &placementv1.Entry{Namespace: k[0], Identity: id}
			byKey[k] = p
		}
		p.Addresses = append(p.Addresses, e.IP.String())
		since := metav1.NewTime(e.AllocatedAt.Truncate(time.Second))
		if p.Pod == "" || since.After(p.Since.Time) {
			p.Since, p.Pod, p.PodUID = since, pod, types.UID(e.UID)
		}
		switch {
		case e.State == reservation.Allocated:
			running[k] = true
		case e.Held():
			p.Held = true
		case p.Until == nil || e.ExpiresAt.After(p.Until.Time):
			t := metav1.NewTime(e.ExpiresAt.Truncate(time.Second))
			p.Until = &t
		}
	}
	for k, p := range byKey {
		if running[k] {
			p.Until, p.Held = nil, false
		} else if p.Held {
			p.Until = nil
		}
		slices.SortFunc(p.Addresses, func(a, b string) int {
			return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
		})
		out = append(out, *p)
	}
	out, dropped = fit(out)
	slices.SortFunc(out, func(a, b placementv1.Entry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Identity, b.Identity))
	})
	return out, dropped
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

// fit keeps at most placementv1.MaxEntries entries: the running pods'
// first, then the latest reservations.
func fit(es []placementv1.Entry) (kept []placementv1.Entry, dropped int) {
	if len(es) <= placementv1.MaxEntries {
		return es, 0
	}
	slices.SortFunc(es, func(a, b placementv1.Entry) int {
		if a.Running() != b.Running() {
			if a.Running() {
				return -1
			}
			return 1
		}
		return b.Since.Compare(a.Since.Time)
	})
	return es[:placementv1.MaxEntries], len(es) - placementv1.MaxEntries
}
