package ipam

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// Del releases what (containerID, ifname) holds: addresses recorded with a
// reservation duration become reservations of the pod identity, the others
// are freed (cooling down for ReuseDelay). Deleting an unknown sandbox
// succeeds; when the DEL changes nothing at all (a repeated DEL, a sandbox
// that never got an address, no housekeeping due) it returns
// reservation.ErrNoChange, so the store rolls back instead of committing:
// no disk sync for nothing.
func (e *Engine) Del(tx reservation.Txn, containerID, ifname string) error {
	now := e.now()
	recs, err := tx.ByContainer(containerID, ifname)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		if due, err := e.housekeepingDue(tx, now); err != nil || !due {
			return cmp.Or(err, reservation.ErrNoChange)
		}
	}
	if _, err := e.Housekeep(tx, now); err != nil {
		return err
	}
	if recs, err = tx.ByContainer(containerID, ifname); err != nil {
		return err
	}
	for _, r := range recs {
		if err := e.release(tx, r, now, "DEL"); err != nil {
			return err
		}
	}
	return nil
}

// release ends an allocation as if its sandbox had been deleted at `at`:
// with a recorded duration it becomes a reservation of its identity, unless
// the identity's namespace already holds MaxPerNamespace; else it cools
// down for ReuseDelay (or, with no delay, is freed), remembering its last
// identity. An allocation on an unassignable address (recorded by an
// earlier stickyip) is dropped: it never returns to circulation.
func (e *Engine) release(tx reservation.Txn, r *reservation.Record, at time.Time, why string) error {
	r.LastContainerID, r.ContainerID, r.Netns = r.ContainerID, "", ""
	r.Imported, r.ImportedFrom = false, ""
	r.ReleasedAt = at
	if never := e.unassignables().why(r.IP); never != "" {
		e.log().Warn("dropping an allocation of an address never given to a pod (recorded by an earlier stickyip)", "ip", r.IP,
			"is", never, "container", r.LastContainerID, "pod", r.Identity.Pod(), "why", why)
		return tx.Delete(r.IP)
	}
	if n, err := ReadNodeRanges(tx); err != nil {
		return err
	} else if n.Retires(r.IP) {
		e.log().Warn("freeing an address of a pod CIDR the node no longer has: it is neither reserved nor handed out again", "ip", r.IP,
			"container", r.LastContainerID, "pod", r.Identity.Pod(), "nodeRanges", n.String(), "why", why)
		return tx.Delete(r.IP)
	}
	reserve, err := e.mayReserve(tx, r)
	if err != nil {
		return err
	}
	if !reserve {
		if e.reuseDelay <= 0 {
			e.log().Debug("freeing address", "ip", r.IP, "container", r.LastContainerID, "why", why)
			return tx.Delete(r.IP)
		}
		e.log().Debug("freeing address; it cools down before it is handed out again", "ip", r.IP,
			"container", r.LastContainerID, "reuseDelay", e.reuseDelay.String(), "why", why)
		r.State = reservation.Cooling
		r.ExpiresAt = at.Add(e.reuseDelay)
		r.LastIdentity, r.Identity, r.UID = r.Identity, reservation.Identity{}, ""
		r.Duration, r.RequestedDuration, r.Clamped, r.DurationFrom = 0, 0, false, ""
		return tx.Put(r)
	}
	r.State = reservation.Reserved
	r.ExpiresAt = at.Add(r.Duration)
	e.log().Info("reserving address for pod", "ip", r.IP, "pod", r.Identity.Pod(), "ifname", r.Identity.IfName,
		"until", r.ExpiresAt.UTC().Format(time.RFC3339), "why", why)
	return tx.Put(r)
}

// mayReserve reports whether r, being released, becomes a reservation: it
// has a duration and an identity, and the identity's namespace holds fewer
// than MaxPerNamespace other identities with a live reservation in the
// network. Beyond that bound the DEL frees the address (logged), so one
// namespace can never fill a node's pool with reservations.
func (e *Engine) mayReserve(tx reservation.Txn, r *reservation.Record) (bool, error) {
	if r.Duration <= 0 || r.Identity.IsZero() {
		return false, nil
	}
	if e.maxPerNamespace <= 0 {
		return true, nil
	}
	recs, err := tx.ByNamespace(r.Identity.Namespace)
	if err != nil {
		return false, err
	}
	now := e.now()
	others := map[reservation.Identity]bool{}
	for _, o := range recs {
		if o.State == reservation.Reserved && !o.Expired(now) && !o.Identity.Same(r.Identity) {
			others[o.Identity] = true
		}
	}
	if len(others) < e.maxPerNamespace {
		return true, nil
	}
	e.log().Warn("not reserving: the namespace already holds the most reservations it may (ipam.reservation.maxPerNamespace); the address is freed",
		"ip", r.IP, "pod", r.Identity.Pod(), "ifname", r.Identity.IfName, "namespace", r.Identity.Namespace,
		"reservations", len(others), "maxPerNamespace", e.maxPerNamespace)
	return false, nil
}

// PodRelease says what ReleasePod did with one record.
type PodRelease struct {
	*reservation.Record
	// Dropped: the reservation was deleted. Otherwise the record is still
	// allocated to a live sandbox, and will be freed, not reserved, at its DEL.
	Dropped bool
}

// ReleasePod gives up the reservations of the identity namespace/name (on
// ifname, or every interface when empty): reserved addresses are freed at
// once (the operator's explicit choice, whatever the network's reuse delay);
// an address a live sandbox of the identity still holds keeps its sandbox but
// loses its reservation duration, so its DEL frees it. It needs no network
// config, so an operator can always release.
func ReleasePod(tx reservation.Txn, namespace, name, ifname string, log *slog.Logger) ([]PodRelease, error) {
	recs, err := reservation.PodRecords(tx, namespace, name)
	if err != nil {
		return nil, err
	}
	var out []PodRelease
	for _, r := range recs {
		if ifname != "" && r.Identity.IfName != ifname {
			continue
		}
		if r.State == reservation.Reserved {
			log.Info("reservation released by the operator", "ip", r.IP, "pod", r.Identity.Pod())
			if err := tx.Delete(r.IP); err != nil {
				return nil, err
			}
			out = append(out, PodRelease{Record: r, Dropped: true})
			continue
		}
		r.Duration, r.DurationFrom = 0, ""
		if err := tx.Put(r); err != nil {
			return nil, err
		}
		out = append(out, PodRelease{Record: r})
	}
	return out, nil
}
