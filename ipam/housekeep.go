package ipam

import (
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/reservation"
)

// housekeepingDue reports whether Housekeep would change anything.
func (e *Engine) housekeepingDue(tx reservation.Txn, now time.Time) (bool, error) {
	if e.hostLocalDir != "" {
		if done, err := tx.Meta(metaHostLocalImported); err != nil || done == "" {
			return true, err
		}
	}
	if e.env.BootID != "" {
		if last, err := tx.Meta(metaBootID); err != nil || last != e.env.BootID {
			return true, err
		}
	}
	due := false
	err := tx.ByExpiry(func(r *reservation.Record) bool {
		if r.Held() {
			return true // its StatefulSet keeps it: look further
		}
		due = r.Expired(now)
		return false
	})
	return due, err
}

// Housekeep brings the network's records up to date before a change:
// releases allocations of a previous boot (their reservation clock starts at
// the new boot), imports host-local's data once, and drops expired
// reservations and cooling records (never a Held one: its StatefulSet
// decides). It returns how many it dropped.
//
// The boot sweep goes first: it walks every record, and the records an import
// adds carry this boot's ID, so sweeping them too would only double the cost
// of the first call on a full node (and an address both stores record stays
// held by the imported allocation instead of being freed by the sweep).
func (e *Engine) Housekeep(tx reservation.Txn, now time.Time) (expired int, err error) {
	if e.env.BootID != "" {
		last, err := tx.Meta(metaBootID)
		if err != nil {
			return 0, err
		}
		if last != e.env.BootID {
			if err := e.rebootSweep(tx, now); err != nil {
				return 0, err
			}
			if err := tx.SetMeta(metaBootID, e.env.BootID); err != nil {
				return 0, err
			}
		}
	}
	if e.hostLocalDir != "" {
		done, err := tx.Meta(metaHostLocalImported)
		if err != nil {
			return 0, err
		}
		if done == "" {
			if e.hostLocal == nil || e.hostLocal.Dir != e.hostLocalDir {
				e.hostLocal = &HostLocal{Dir: e.hostLocalDir}
			}
			n, err := e.hostLocal.Import(tx, e.rangeSets, e.env.BootID, now, e.log())
			if err != nil {
				return 0, err
			}
			if err := MarkImported(tx, now, n); err != nil {
				return 0, err
			}
		}
	}
	return e.purgeExpired(tx, now)
}

func (e *Engine) rebootSweep(tx reservation.Txn, now time.Time) error {
	var start time.Time
	if e.env.BootTime != nil {
		start = e.env.BootTime()
	}
	if start.IsZero() || start.After(now) {
		start = now
	}
	stale, err := collect(tx, func(r *reservation.Record) bool {
		return r.State == reservation.Allocated && r.BootID != "" && r.BootID != e.env.BootID
	})
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		e.log().Info("node rebooted: releasing allocations of the previous boot", "count", len(stale))
	}
	for _, r := range stale {
		if err := e.release(tx, r, start, "reboot"); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) purgeExpired(tx reservation.Txn, now time.Time) (int, error) {
	var expired []*reservation.Record
	err := tx.ByExpiry(func(r *reservation.Record) bool {
		if r.Held() {
			return true // past its own end, kept by its StatefulSet
		}
		if !r.Expired(now) {
			return false
		}
		expired = append(expired, r)
		return true
	})
	if err != nil {
		return 0, err
	}
	for _, r := range expired {
		if r.State == reservation.Reserved {
			e.log().Info("reservation expired", "ip", r.IP, "pod", r.Identity.Pod())
		}
		if err := tx.Delete(r.IP); err != nil {
			return 0, err
		}
	}
	return len(expired), nil
}

func collect(tx reservation.Txn, keep func(*reservation.Record) bool) ([]*reservation.Record, error) {
	var out []*reservation.Record
	err := tx.ForEach(func(r *reservation.Record) error {
		if keep(r) {
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// GC handles every allocation not in valid as deleted (CNI GC) and drops
// expired reservations. It returns how many allocations it released.
func (e *Engine) GC(tx reservation.Txn, valid []types.GCAttachment) (int, error) {
	now := e.now()
	if _, err := e.Housekeep(tx, now); err != nil {
		return 0, err
	}
	keep := map[[2]string]bool{}
	keepID := map[string]bool{}
	for _, a := range valid {
		keep[[2]string{a.ContainerID, a.IfName}] = true
		keepID[a.ContainerID] = true
	}
	gone, err := collect(tx, func(r *reservation.Record) bool {
		if r.State != reservation.Allocated {
			return false
		}
		if r.IfName == "" { // host-local imports of the old format carry no ifname
			return !keepID[r.ContainerID]
		}
		return !keep[[2]string{r.ContainerID, r.IfName}]
	})
	if err != nil {
		return 0, err
	}
	for _, r := range gone {
		if err := e.release(tx, r, now, "GC"); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}

// Sweep releases allocations whose sandbox is gone (previous boot, or network
// namespace no longer there) and drops expired reservations and cooling
// records. It is what the operator tool's gc runs when no list of valid
// attachments is at hand. It returns how many records expired and how many
// allocations it released.
func (e *Engine) Sweep(tx reservation.Txn) (expired, released int, err error) {
	now := e.now()
	if expired, err = e.Housekeep(tx, now); err != nil {
		return 0, 0, err
	}
	released, err = e.releaseDead(tx, now, "sandbox gone", func(*reservation.Record) bool { return true })
	return expired, released, err
}

// ReleaseIfGone handles the allocations of (containerID, ifname) as a DEL when
// their sandbox is gone: it belongs to a previous boot, or its network
// namespace path is missing. A sandbox in doubt counts as alive and keeps its
// addresses. This is the release for a caller that only knows the sandbox is
// unknown to its runtime (checkpointd's leak reconciliation): another runtime,
// nerdctl or cnitool may run sandboxes on the same store. It returns how many
// allocations it released (0 with reservation.ErrNoChange when none).
func (e *Engine) ReleaseIfGone(tx reservation.Txn, containerID, ifname string) (int, error) {
	recs, err := tx.ByContainer(containerID, ifname)
	if err != nil {
		return 0, err
	}
	dead := slices.DeleteFunc(recs, e.alive)
	if len(dead) == 0 {
		return 0, reservation.ErrNoChange
	}
	now := e.now()
	if _, err := e.Housekeep(tx, now); err != nil { // a previous boot's: released from the boot on
		return 0, err
	}
	if _, err := e.releaseDead(tx, now, "sandbox gone", func(r *reservation.Record) bool {
		return r.ContainerID == containerID && r.IfName == ifname
	}); err != nil {
		return 0, err
	}
	return len(dead), nil
}

// releaseDead handles every allocation in scope whose sandbox is gone as a DEL
// and returns how many it released.
func (e *Engine) releaseDead(tx reservation.Txn, now time.Time, why string, inScope func(*reservation.Record) bool) (int, error) {
	dead, err := collect(tx, func(r *reservation.Record) bool {
		return r.State == reservation.Allocated && inScope(r) && !e.alive(r)
	})
	if err != nil {
		return 0, err
	}
	for _, r := range dead {
		if err := e.release(tx, r, now, why); err != nil {
			return 0, err
		}
	}
	return len(dead), nil
}
