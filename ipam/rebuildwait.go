package ipam

import (
	"fmt"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// RestoreReservations puts back, into a rebuilt network, the reservations
// that only the node's NodeRecord knew while the API server was away (the
// wait Rebuild set), and ends the wait. Each is placed as Rebuild places
// restored reservations: on addresses nothing holds now (a sandbox's
// allocation wins), while the identity holds no other address in the range
// set, and not past its end.
func (e *Engine) RestoreReservations(tx reservation.Txn, restored []Restored) (RebuildReport, error) {
	var rep RebuildReport
	now := e.now()
	if _, err := e.Housekeep(tx, now); err != nil {
		return rep, err
	}
	for _, r := range restored {
		if err := e.restore(tx, r, now, &rep); err != nil {
			return rep, err
		}
	}
	if err := tx.SetMeta(metaRebuildWait, ""); err != nil {
		return rep, err
	}
	return rep, e.count(tx, &rep)
}

// RebuildWait returns until when a rebuilt network waits for the placement
// index's reservations (zero: it does not, or no longer does at now).
func RebuildWait(tx reservation.Txn, now time.Time) (time.Time, error) {
	v, err := tx.Meta(metaRebuildWait)
	if err != nil || v == "" {
		return time.Time{}, err
	}
	until, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || !now.Before(until) {
		// Unreadable counts as over: the wait only ever holds back
		// addresses, and it must not do so for good.
		return time.Time{}, nil
	}
	return until, nil
}

// refuseWhileWaiting fails a new address (one the pod does not hold) while
// the rebuilt network waits for the record's reservations.
func (e *Engine) refuseWhileWaiting(tx reservation.Txn, now time.Time) error {
	until, err := RebuildWait(tx, now)
	if err != nil || until.IsZero() {
		return err
	}
	return fmt.Errorf("%w: the store was rebuilt while the API server was away, so the reservations of deleted pods that only the NodeRecord holds are not in it yet; "+
		"no new address is handed out until checkpointd has read them, or until %s", ErrRebuildWait, until.UTC().Format(time.RFC3339))
}

// restore places one restored reservation (see RestoreReservations).
func (e *Engine) restore(tx reservation.Txn, r Restored, now time.Time, rep *RebuildReport) error {
	who := fmt.Sprintf("%s (%s)", r.Identity.Pod(), r.From)
	never := e.unassignables()
	var follows *reservation.StatefulSetRef
	if r.Retained {
		set, _, ok := contract.StatefulSetOf(r.Identity.Name)
		if !ok {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s kept by its StatefulSet, but no StatefulSet names its pods so: not put back", who))
			return nil
		}
		follows = &reservation.StatefulSetRef{Name: set}
		if r.StatefulSet != nil && r.StatefulSet.Name == set {
			c := *r.StatefulSet
			follows = &c
		}
		r.Until = now.Add(r.Duration) // its own end, counted from the rebuild
	}
	for _, ip := range r.IPs {
		set := e.setOf(&reservation.Record{IP: ip}, never)
		cur, err := tx.Get(ip)
		if err != nil {
			return err
		}
		held, err := e.identityHolds(tx, r.Identity, max(set, 0))
		switch {
		case err != nil:
			return err
		case !now.Before(r.Until) && !r.Retained:
			continue // over: nothing to put back
		case set < 0:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s reserved for %s: not an address this network hands out (%s)", ip, who, rangesString(e.rangeSets)))
			continue
		case cur != nil && cur.Identity == r.Identity:
			switch {
			case cur.State == reservation.Reserved && follows != nil && cur.StatefulSet == nil:
				cur.StatefulSet = follows // the record kept it for its StatefulSet: held
			case cur.State == reservation.Reserved && r.Until.Before(cur.ExpiresAt) && !r.Retained:
				cur.ExpiresAt = r.Until // the earlier end of two sources: never later than it would have been
			default:
				continue
			}
			if err := tx.Put(cur); err != nil {
				return err
			}
			continue
		case cur != nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s reserved for %s: now %s, which keeps it", ip, who, holderPhrase(cur)))
			continue
		case held != nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s reserved for %s: the pod holds %s now", ip, who, held.IP))
			continue
		}
		since := r.Since
		if since.IsZero() || since.After(now) {
			since = now
		}
		rec := &reservation.Record{
			IP: ip, RangeSet: set, State: reservation.Reserved, Identity: r.Identity, PodName: r.PodName, UID: r.UID,
			Duration: r.Until.Sub(now).Round(time.Second), AllocatedAt: since, ReleasedAt: now, ExpiresAt: r.Until,
			StatefulSet: follows,
		}
		e.log().Info("reservation restored", "ip", ip, "pod", r.Identity.Pod(), "ifname", r.Identity.IfName,
			"until", r.Until.UTC().Format(time.RFC3339), "from", r.From)
		if err := tx.Put(rec); err != nil {
			return err
		}
	}
	return nil
}
