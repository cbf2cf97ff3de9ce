package ipam

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/reservation"
)

// Keys of per-network metadata.
const (
	metaBootID            = "bootID"
	metaHostLocalImported = "hostLocalImported"
	metaLastReservedPre   = "lastReserved."
)

// Env is what the engine needs from the machine; tests replace it.
type Env struct {
	// Now returns the current time.
	Now func() time.Time
	// BootID identifies the current boot (/proc/sys/kernel/random/boot_id).
	BootID string
	// BootTime returns when the current boot started; it is asked only after
	// a reboot. Nil means "unknown" (the reservation clock then starts now).
	BootTime func() time.Time
	// SandboxGone reports whether a recorded path — a network namespace, or
	// host-local's file of an imported allocation — is gone, so its sandbox is
	// dead. Nil means "always alive".
	SandboxGone func(netns string) bool
	// Log receives what the operator should know about; nil discards.
	Log *slog.Logger
}

// Engine allocates addresses from a network's range sets by the rules of that
// network's config. Build it with NewEngine: every rule (reuse delay, pool-full
// policy, host-local import) comes from the config, so no caller can apply one
// network's records with other rules.
type Engine struct {
	rangeSets []RangeSet // canonical, as returned by LoadConfig
	policy    PoolFullPolicy
	// reuseDelay keeps an address freed without a reservation out of use for
	// this long while others are free (0: freed addresses are free at once).
	reuseDelay time.Duration
	// hostLocalDir is host-local's data directory for this network
	// (<hostLocalDataDir>/<network>); "" disables the import.
	hostLocalDir string
	// maxPerNamespace bounds the identities of one namespace holding a
	// reservation in the network (ipam.reservation.maxPerNamespace); a DEL
	// beyond it frees instead of reserving. 0: no bound.
	maxPerNamespace int
	env             Env
}

// NewEngine returns the engine of the network whose loaded config is c.
func NewEngine(c *Config, env Env) *Engine {
	e := &Engine{rangeSets: c.Ranges, policy: c.Reservation.PoolFull, reuseDelay: c.Reservation.ReuseDelay,
		maxPerNamespace: c.Reservation.MaxPerNamespace, env: env}
	if c.HostLocalDataDir != "" {
		e.hostLocalDir = c.HostLocalDataDir + "/" + c.Name
	}
	return e
}

func (e *Engine) log() *slog.Logger {
	if e.env.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.env.Log
}

func (e *Engine) now() time.Time {
	if e.env.Now == nil {
		return time.Now()
	}
	return e.env.Now()
}

// alive reports whether an allocation's sandbox may still be running.
func (e *Engine) alive(r *reservation.Record) bool {
	if r.State != reservation.Allocated {
		return false
	}
	if r.BootID != "" && e.env.BootID != "" && r.BootID != e.env.BootID {
		return false
	}
	if e.env.SandboxGone == nil {
		return true
	}
	if r.Netns != "" && e.env.SandboxGone(r.Netns) {
		return false
	}
	if r.ImportedFrom != "" && e.env.SandboxGone(r.ImportedFrom) {
		return false // host-local released the pod (its DEL went to host-local)
	}
	return true
}

// AddRequest is one ADD.
type AddRequest struct {
	ContainerID string
	IfName      string
	Netns       string
	// Identity is the pod's (or, for a restored static pod, its parent's)
	// namespace/name and ifname; zero for a call without pod arguments.
	Identity reservation.Identity
	UID      string
	// PodName is the pod's own name (K8S_POD_NAME), recorded for placement.
	PodName string
	// Duration is the clamped reservation to apply at DEL; RequestedDuration
	// and Clamped record what the annotation asked for.
	Duration          time.Duration
	RequestedDuration time.Duration
	Clamped           bool
	// Requested are specific addresses asked for (at most one per range set).
	Requested []netip.Addr
}

// Add gives the sandbox one address from every range set and returns the
// records in range-set order. A retried ADD of the same sandbox returns what
// it already holds.
func (e *Engine) Add(tx reservation.Txn, req AddRequest) ([]*reservation.Record, error) {
	now := e.now()
	if _, err := e.Housekeep(tx, now); err != nil {
		return nil, err
	}
	if err := e.refuseRetired(tx); err != nil {
		return nil, err
	}
	requested, err := e.requestedBySet(req.Requested)
	if err != nil {
		return nil, err
	}

	mine, err := tx.ByContainer(req.ContainerID, req.IfName)
	if err != nil {
		return nil, err
	}
	if len(mine) > 0 {
		dropped, err := e.dropUnassignable(tx, mine)
		if err != nil {
			return nil, err
		}
		if !dropped {
			slices.SortFunc(mine, func(a, b *reservation.Record) int { return a.RangeSet - b.RangeSet })
			return mine, nil
		}
	}

	var held []*reservation.Record
	if !req.Identity.IsZero() {
		if held, err = tx.ByIdentity(req.Identity); err != nil {
			return nil, err
		}
		for _, h := range held {
			if h.State != reservation.Allocated {
				continue
			}
			switch {
			case req.UID != "" && h.UID == req.UID:
				e.log().Info("same pod, new sandbox: taking over its address", "pod", req.Identity.Pod(), "ip", h.IP, "old", h.ContainerID, "new", req.ContainerID)
			case !e.alive(h):
				e.log().Info("previous holder's sandbox is gone: taking over its address", "pod", req.Identity.Pod(), "ip", h.IP, "old", h.ContainerID, "netns", h.Netns)
			default:
				return nil, fmt.Errorf("%w: %s of %s is held by %s, which may still be running; try again once it is deleted",
					ErrHolderAlive, h.IP, req.Identity.Pod(), h.Holder())
			}
		}
	}
	isHeld := func(ip netip.Addr) bool {
		return slices.ContainsFunc(held, func(h *reservation.Record) bool { return h.IP == ip })
	}
	never := e.unassignables()

	var out []*reservation.Record
	for i := range e.rangeSets {
		rs := &e.rangeSets[i]
		var ip netip.Addr
		dynamic := false
		switch want, ok := requested[i]; {
		case ok:
			cur, err := tx.Get(want)
			if err != nil {
				return nil, err
			}
			// A cooling address goes only to the identity that last held
			// it until its delay has passed (Housekeep dropped the ones
			// past it): stale DNS records and conntrack entries for that
			// pod must not reach anyone else.
			mayTake := cur == nil || isHeld(want) ||
				(cur.State == reservation.Cooling && !req.Identity.IsZero() && cur.LastIdentity == req.Identity)
			if !mayTake {
				return nil, fmt.Errorf("%w: %s is %s", ErrIPUnavailable, want, holderPhrase(cur))
			}
			ip = want
		default:
			if h := heldIn(held, rs, never); h != nil {
				ip = h.IP
				break
			}
			if ip, err = e.findFree(tx, i, req.Identity, now); err != nil {
				return nil, err
			}
			dynamic = true
		}
		rec := &reservation.Record{
			IP: ip, RangeSet: i, State: reservation.Allocated,
			ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns, BootID: e.env.BootID,
			Identity: req.Identity, UID: req.UID, PodName: req.PodName,
			Duration: req.Duration, RequestedDuration: req.RequestedDuration, Clamped: req.Clamped,
			AllocatedAt: now,
		}
		if err := tx.Put(rec); err != nil {
			return nil, err
		}
		if dynamic {
			if err := tx.SetMeta(metaLastReservedPre+strconv.Itoa(i), ip.String()); err != nil {
				return nil, err
			}
		}
		out = append(out, rec)
	}
	// The identity now holds exactly what it got; older records of it go.
	for _, h := range held {
		if !slices.ContainsFunc(out, func(r *reservation.Record) bool { return r.IP == h.IP }) {
			e.log().Info("dropping the identity's previous address", "pod", req.Identity.Pod(), "ip", h.IP)
			if err := tx.Delete(h.IP); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func holderPhrase(r *reservation.Record) string {
	if r.State == reservation.Allocated {
		return "in use by " + r.Holder()
	}
	return r.Holder()
}

// heldIn returns the identity's record in range set rs, unless it sits on
// an unassignable address (an earlier stickyip may have recorded one).
func heldIn(held []*reservation.Record, rs *RangeSet, never unassignableSet) *reservation.Record {
	for _, h := range held {
		if rs.Contains(net.IP(h.IP.AsSlice())) && never.why(h.IP) == "" {
			return h
		}
	}
	return nil
}

// dropUnassignable deletes recs, the allocations of one sandbox, when one of
// them sits on an unassignable address (recorded by an earlier stickyip),
// and says so: a retried ADD of that sandbox then allocates afresh instead
// of returning the address.
func (e *Engine) dropUnassignable(tx reservation.Txn, recs []*reservation.Record) (bool, error) {
	never := e.unassignables()
	if !slices.ContainsFunc(recs, func(r *reservation.Record) bool { return never.why(r.IP) != "" }) {
		return false, nil
	}
	for _, r := range recs {
		e.log().Warn("dropping the sandbox's allocation: one of its addresses is never given to a pod", "ip", r.IP,
			"is", never.why(r.IP), "container", r.ContainerID)
		if err := tx.Delete(r.IP); err != nil {
			return false, err
		}
	}
	return true, nil
}

// requestedBySet maps requested addresses to their range sets, as host-local
// does. It is the one place every requested address passes (the annotation,
// CNI_ARGS IP, the ips capability, args.cni.ips): an address in no range, an
// unassignable one, or two different ones in one range set are an invalid
// request (the same address from two sources is one request).
func (e *Engine) requestedBySet(reqs []netip.Addr) (map[int]netip.Addr, error) {
	never := e.unassignables()
	out := map[int]netip.Addr{}
	for _, ip := range reqs {
		if why := never.why(ip); why != "" {
			return nil, fmt.Errorf("%w: requested IP %s is %s, which is never given to a pod", ErrInvalidRequest, ip, why)
		}
		idx := slices.IndexFunc(e.rangeSets, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) })
		if idx < 0 {
			return nil, fmt.Errorf("%w: requested IP %s is not in any configured range (%s)", ErrInvalidRequest, ip, rangesString(e.rangeSets))
		}
		if prev, dup := out[idx]; dup && prev != ip {
			return nil, fmt.Errorf("%w: requested IPs %s and %s are in the same range set; ask for at most one per range set", ErrInvalidRequest, prev, ip)
		}
		out[idx] = ip
	}
	return out, nil
}

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
		due = r.Expired(now)
		return false
	})
	return due, err
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
		r.Duration, r.RequestedDuration, r.Clamped = 0, 0, false
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
		if o.State == reservation.Reserved && !o.Expired(now) && o.Identity != r.Identity {
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

// Housekeep brings the network's records up to date before a change:
// releases allocations of a previous boot (their reservation clock starts at
// the new boot), imports host-local's data once, and drops expired
// reservations and cooling records. It returns how many it dropped.
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
			n, err := ImportHostLocal(tx, e.hostLocalDir, e.rangeSets, e.env.BootID, now, e.log())
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
		r.Duration = 0
		if err := tx.Put(r); err != nil {
			return nil, err
		}
		out = append(out, PodRelease{Record: r})
	}
	return out, nil
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

// Check verifies that the container holds the addresses of its previous result
// that belong to this network's ranges.
func (e *Engine) Check(tx reservation.Txn, containerID, ifname string, prev []netip.Addr) error {
	recs, err := tx.ByContainer(containerID, ifname)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%w: container %s interface %s", ErrNoAllocation, containerID, ifname)
	}
	for _, ip := range prev {
		inRange := slices.ContainsFunc(e.rangeSets, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) })
		if !inRange {
			continue
		}
		if !slices.ContainsFunc(recs, func(r *reservation.Record) bool { return r.IP == ip }) {
			return fmt.Errorf("%w: %s from the previous result is not recorded for container %s", ErrNoAllocation, ip, containerID)
		}
	}
	return nil
}
