package ipam

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// Keys of the per-network metadata a rebuild writes.
const (
	// metaRebuilt records when the network's records were rebuilt.
	metaRebuilt = "rebuilt"
	// metaRebuildWait holds the time until which the rebuilt network waits
	// for the placement index's reservations (RFC 3339): meanwhile no
	// address that is not already the pod's is handed out.
	metaRebuildWait = "rebuildWait"
)

// previousBoot is the boot ID a rebuild gives the allocations of sandboxes
// that predate this boot: the boot sweep (Housekeep) releases them as of
// the boot, as it does every allocation of an earlier boot.
const previousBoot = "rebuild:previous-boot"

// Attachment is one sandbox's hold on addresses of a network as the node's
// own sources (the runtime, its CNI result cache, the sandboxes' network
// namespaces) show it: what a rebuild records as the ADD that gave them.
type Attachment struct {
	ContainerID string
	IfName      string
	// Netns is the sandbox's network namespace path ("": unknown, the
	// sandbox counts as alive).
	Netns string
	// Args and Annotations are the pod's CNI_ARGS and annotations at its
	// ADD: the pod's identity and reservation duration come from them by
	// the plugin's own rules (Config.AddRequest).
	Args        PodArgs
	Annotations map[string]string
	IPs         []netip.Addr
	// Since is when the sandbox got them (its ADD, or its creation; zero:
	// now). Before the boot, the sandbox is of an earlier boot, unless
	// Running.
	Since time.Time
	// Running: the runtime runs the sandbox now, so it is of this boot
	// whatever Since says (a runtime lists an earlier boot's as stopped).
	Running bool
}

// Restored is a reservation known outside the node's runtime (the node's
// entries in the placement index, a checkpoint), put back by a rebuild
// where no sandbox holds its addresses.
type Restored struct {
	Identity reservation.Identity
	// PodName and UID name the pod whose reservation it is (UID: "" when
	// the source does not say): the placement publisher names the pod by
	// them, and the node applies the controller's verdict on that pod's
	// claim only to the record of the same UID.
	PodName string
	UID     string
	IPs     []netip.Addr
	// Until is when it ends (it is not restored when that has passed).
	Until time.Time
	// Since is when the identity got the addresses (its ADD), as the
	// source says (zero: unknown, now): the placement publisher then sees
	// the same claim as the entry it came from, and keeps its seq.
	Since time.Time
	// Retained: the source kept it as a reservation its StatefulSet keeps:
	// it is put back held (Until is not used), following StatefulSet, or
	// when that is nil the StatefulSet its identity's name gives (without
	// UID: the controller's verdict names it), with Duration as its own
	// duration (what it lasts once following stops).
	Retained    bool
	Duration    time.Duration
	StatefulSet *reservation.StatefulSetRef
	// From names the source, for the report.
	From string
}

// RebuildReport says what a rebuild put in a network, and what it could
// not place and why.
type RebuildReport struct {
	Allocated, Reserved, Cooling int
	Problems                     []string
}

// Rebuild fills tx, the network's records in a new store, from what the
// node's sources show: every address of attachments (in priority order: an
// address two attachments show goes to the first), then the boot sweep,
// the host-local import and the release of the sandboxes found gone, by the
// engine's usual rules (Housekeep, releaseDead: reservations from each
// allocation's recorded duration), then the restored reservations, on
// addresses nothing holds. With waitUntil set, no address a pod does not
// already hold is handed out before it (ErrRebuildWait) unless
// RestoreReservations runs first: the reservations only the placement index
// knows are not in yet.
func (e *Engine) Rebuild(tx reservation.Txn, atts []Attachment, restored []Restored, waitUntil time.Time) (RebuildReport, error) {
	var rep RebuildReport
	if err := tx.ForEach(func(r *reservation.Record) error { return fmt.Errorf("network is not empty: it holds %s", r.IP) }); err != nil {
		return rep, err
	}
	now := e.now()
	for _, a := range atts {
		if err := e.rebuildAttachment(tx, a, now, &rep); err != nil {
			return rep, err
		}
	}
	if _, err := e.Housekeep(tx, now); err != nil {
		return rep, err
	}
	if _, err := e.releaseDead(tx, now, "rebuild: sandbox gone", func(*reservation.Record) bool { return true }); err != nil {
		return rep, err
	}
	for _, r := range restored {
		if err := e.restore(tx, r, now, &rep); err != nil {
			return rep, err
		}
	}
	if err := tx.SetMeta(metaRebuilt, now.UTC().Format(time.RFC3339Nano)); err != nil {
		return rep, err
	}
	if !waitUntil.IsZero() && waitUntil.After(now) {
		if err := tx.SetMeta(metaRebuildWait, waitUntil.UTC().Format(time.RFC3339Nano)); err != nil {
			return rep, err
		}
	}
	return rep, e.count(tx, &rep)
}

// rebuildAttachment records the addresses of one attachment as its ADD
// did, each in its range set: an address in no range, unassignable, already
// recorded, or a second one of the sandbox in one range set is reported
// and left out; a second address of the identity in one range set is kept
// without the identity (out of the pool, not sticky).
func (e *Engine) rebuildAttachment(tx reservation.Txn, a Attachment, now time.Time, rep *RebuildReport) error {
	req, problem := e.attachmentRequest(a)
	who := "container " + a.ContainerID + "/" + a.IfName
	if !req.Identity.IsZero() {
		who += " of pod " + req.Identity.Pod()
	}
	if problem != "" {
		rep.Problems = append(rep.Problems, who+": "+problem)
	}
	boot := e.env.BootID
	if bt := e.bootTime(); !a.Running && !a.Since.IsZero() && !bt.IsZero() && a.Since.Before(bt) && boot != "" {
		boot = previousBoot
	}
	since := a.Since
	if since.IsZero() {
		since = now
	}
	never := e.unassignables()
	taken := map[int]bool{}
	for _, ip := range a.IPs {
		set := e.setOf(&reservation.Record{IP: ip}, never)
		cur, err := tx.Get(ip)
		switch {
		case err != nil:
			return err
		case set < 0:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): not an address this network hands out (%s)", ip, who, rangesString(e.rangeSets)))
			continue
		case cur != nil:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): also shown for %s, which keeps it", ip, who, cur.Holder()))
			continue
		case taken[set]:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): a second address of the sandbox in one range set (not stickyip's)", ip, who))
			continue
		}
		taken[set] = true
		rec := &reservation.Record{
			IP: ip, RangeSet: set, State: reservation.Allocated,
			ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns, BootID: boot,
			Identity: req.Identity, UID: req.UID, PodName: req.PodName,
			Duration: req.Duration, RequestedDuration: req.RequestedDuration, Clamped: req.Clamped, DurationFrom: req.DurationFrom,
			AllocatedAt: since,
		}
		if held, err := e.identityHolds(tx, req.Identity, set); err != nil {
			return err
		} else if held != nil {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s): the pod also holds %s, so this address is kept without a reservation", ip, who, held.IP))
			rec.Identity, rec.UID, rec.PodName, rec.Duration, rec.RequestedDuration, rec.Clamped, rec.DurationFrom = reservation.Identity{}, "", "", 0, 0, false, ""
		}
		if err := tx.Put(rec); err != nil {
			return err
		}
	}
	return nil
}

// attachmentRequest is the request of the attachment's ADD, by the plugin's
// rules (Config.AddRequest) on the network's config with the pod's CNI_ARGS
// and annotations. When the config now refuses the request (an annotation
// it no longer allows) the identity and duration are taken alone
// (Config.Identity, Config.ReservationFor), and when those fail too, the
// addresses are kept without an identity. problem says why.
func (e *Engine) attachmentRequest(a Attachment) (AddRequest, string) {
	c := *e.conf
	c.Args, c.Annotations, c.IPArgs = a.Args, a.Annotations, nil
	req, err := c.AddRequest(a.ContainerID, a.IfName, a.Netns, slog.New(slog.DiscardHandler))
	if err == nil {
		return req, ""
	}
	problem := fmt.Sprintf("its ADD would be refused now (%v)", err)
	req = AddRequest{ContainerID: a.ContainerID, IfName: a.IfName, Netns: a.Netns, UID: a.Args.UID}
	who, ierr := c.Identity()
	if ierr != nil || who.IsZero() {
		return req, problem + "; its addresses are kept without an identity"
	}
	req.Identity, req.PodName = reservation.Identity{Namespace: who.Namespace, Name: who.Name, IfName: a.IfName}, who.Pod
	if d, requested, clamped, derr := c.ReservationFor(); derr == nil {
		req.Duration, req.RequestedDuration, req.Clamped = d, requested, clamped
		if from, ferr := c.DurationFrom(); ferr == nil && d > 0 {
			req.DurationFrom = from
		}
	}
	return req, problem
}

// identityHolds returns the identity's record in range set set, if any.
func (e *Engine) identityHolds(tx reservation.Txn, id reservation.Identity, set int) (*reservation.Record, error) {
	if id.IsZero() {
		return nil, nil
	}
	held, err := tx.ByIdentity(id)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(held, func(r *reservation.Record) bool {
		return e.rangeSets[set].Contains(net.IP(r.IP.AsSlice()))
	})
	if i < 0 {
		return nil, nil
	}
	return held[i], nil
}

func (e *Engine) bootTime() time.Time {
	if e.env.BootTime == nil {
		return time.Time{}
	}
	return e.env.BootTime()
}

// count sets the report's totals from the records.
func (e *Engine) count(tx reservation.Txn, rep *RebuildReport) error {
	rep.Allocated, rep.Reserved, rep.Cooling = 0, 0, 0
	return tx.ForEach(func(r *reservation.Record) error {
		switch r.State {
		case reservation.Allocated:
			rep.Allocated++
		case reservation.Reserved:
			rep.Reserved++
		case reservation.Cooling:
			rep.Cooling++
		}
		return nil
	})
}
