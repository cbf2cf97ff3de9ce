package ipam

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// AddRequest is one ADD.
type AddRequest struct {
	ContainerID string
	IfName      string
	Netns       string
	// Identity is the pod's (or, for a restored static pod, its parent's)
	// namespace/name and ifname; zero for a call without pod arguments.
	Identity reservation.Identity
	UID      string
	// PodName is the name of the pod the identity stands for (Who.Pod: the
	// pod's own, or a restored copy's parent's), recorded for placement.
	PodName string
	// Duration is the clamped reservation to apply at DEL; RequestedDuration
	// and Clamped record what the annotation asked for, DurationFrom who set
	// the annotation (Config.DurationFrom).
	Duration          time.Duration
	RequestedDuration time.Duration
	Clamped           bool
	DurationFrom      string
	// Retention is "" (the reservation follows the pod's StatefulSet, once
	// checkpointd has recorded it) or contract.RetentionFixed.
	Retention string
	// Requested are specific addresses asked for (at most one per range set).
	Requested []netip.Addr
}

// AddRequest builds the engine request of an ADD of the sandbox (containerID,
// ifname, netns) from the config: its CNI_ARGS and the pod's annotations. log
// receives what the operator should know about the request (an identity
// taken from a restored copy's parent, an annotation ignored, a reservation
// clamped).
func (c *Config) AddRequest(containerID, ifname, netns string, log *slog.Logger) (AddRequest, error) {
	if len(containerID) > maxContainerIDLen {
		return AddRequest{}, fmt.Errorf("%w: CNI_CONTAINERID is %d characters, more than %d", ErrInvalidArgs, len(containerID), maxContainerIDLen)
	}
	if len(ifname) > maxIfNameLen {
		return AddRequest{}, fmt.Errorf("%w: CNI_IFNAME %q is longer than %d characters", ErrInvalidArgs, ifname, maxIfNameLen)
	}
	who, err := c.Identity()
	if err != nil {
		return AddRequest{}, err
	}
	d, requested, clamped, err := c.ReservationFor()
	if err != nil {
		return AddRequest{}, err
	}
	from, err := c.DurationFrom()
	if err != nil {
		return AddRequest{}, err
	}
	retention, err := c.Retention()
	if err != nil {
		return AddRequest{}, err
	}
	annotated, err := c.AnnotatedIPs()
	if err != nil {
		return AddRequest{}, err
	}
	req := AddRequest{
		ContainerID: containerID, IfName: ifname, Netns: netns, UID: c.Args.UID,
		Duration: d, RequestedDuration: requested, Clamped: clamped,
		Requested: append(c.RequestedIPs(), annotated...),
	}
	if d > 0 {
		req.DurationFrom, req.Retention = from, retention
	}
	if !who.IsZero() {
		req.Identity = reservation.Identity{Namespace: who.Namespace, Name: who.Name, IfName: ifname}
		req.PodName = who.Pod
	}
	if who.ViaCheckpoint {
		log.Info("restored static pod: using its parent's identity", "parent", req.Identity.Pod(),
			"pod", c.Args.Namespace+"/"+c.Args.Name)
	} else if _, has := c.Annotations[contract.AnnotationCheckpointOf]; has {
		log.Warn("ignoring "+contract.AnnotationCheckpointOf+" on a pod that is not a static pod",
			"pod", c.Args.Namespace+"/"+c.Args.Name)
	}
	if clamped {
		log.Warn("reservation clamped to ipam.reservation.maxDuration", "pod", req.Identity.Pod(),
			"requested", requested.String(), "max", d.String())
	}
	if d > 0 && req.Identity.IsZero() {
		log.Warn("reservation annotation ignored: no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS", "container", containerID)
		req.Duration, req.DurationFrom, req.Retention = 0, "", ""
	}
	return req, nil
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
	if mine, err := e.retried(tx, req); mine != nil || err != nil {
		return mine, err
	}
	held, err := e.takeOver(tx, req)
	if err != nil {
		return nil, err
	}
	never := e.unassignables()
	var out []*reservation.Record
	for i := range e.rangeSets {
		ip, dynamic, err := e.pick(tx, req, i, requested, held, never, now)
		if err != nil {
			return nil, err
		}
		rec := &reservation.Record{
			IP: ip, RangeSet: i, State: reservation.Allocated,
			ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns, BootID: e.env.BootID,
			Identity: req.Identity, UID: req.UID, PodName: req.PodName,
			Duration: req.Duration, RequestedDuration: req.RequestedDuration, Clamped: req.Clamped, DurationFrom: req.DurationFrom,
			Retention: req.Retention, StatefulSet: followed(held, req), AllocatedAt: now,
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

// followed returns the StatefulSet the identity's new allocation follows
// until checkpointd has seen its pod: the one the identity's reservation
// followed (a StatefulSet pod back after a scale-down, an eviction, a
// reboot), so that a pod deleted again before checkpointd's next pass
// keeps what its StatefulSet retains. A request that takes no reservation,
// or a fixed one, follows nothing; nor does the identity of a StatefulSet
// seen deleted (checkpointd records the pod's new one).
func followed(held []*reservation.Record, req AddRequest) *reservation.StatefulSetRef {
	if req.Duration <= 0 || req.Retention == contract.RetentionFixed {
		return nil
	}
	for _, h := range held {
		if h.Follows() {
			w := *h.StatefulSet
			return &w
		}
	}
	return nil
}

// retried returns the records an earlier ADD of the same attachment
// (container ID and interface) already made, when they can all still be
// handed out: the runtime retried. nil: allocate anew (the attachment's
// unassignable records, if any, were dropped).
func (e *Engine) retried(tx reservation.Txn, req AddRequest) ([]*reservation.Record, error) {
	mine, err := tx.ByContainer(req.ContainerID, req.IfName)
	if err != nil || len(mine) == 0 {
		return nil, err
	}
	dropped, err := e.dropUnassignable(tx, mine)
	if err != nil || dropped {
		return nil, err
	}
	slices.SortFunc(mine, func(a, b *reservation.Record) int { return a.RangeSet - b.RangeSet })
	return mine, nil
}

// takeOver returns the records the request's identity holds, refusing
// (ErrHolderAlive) while one is allocated to a sandbox that may still run: an
// address passes to the identity's new sandbox only from the same pod's old
// one or from a sandbox that is gone.
func (e *Engine) takeOver(tx reservation.Txn, req AddRequest) ([]*reservation.Record, error) {
	if req.Identity.IsZero() {
		return nil, nil
	}
	held, err := reservation.IdentityRecords(tx, req.Identity)
	if err != nil {
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
	return held, nil
}

// pick chooses the address of range set i: the one requested for it, if
// the request may take it; else the identity's held one there; else a free
// one (dynamic: remembered as the set's last reserved).
func (e *Engine) pick(tx reservation.Txn, req AddRequest, i int, requested map[int]netip.Addr,
	held []*reservation.Record, never unassignableSet, now time.Time) (ip netip.Addr, dynamic bool, err error) {
	want, ok := requested[i]
	if !ok {
		if h := heldIn(held, &e.rangeSets[i], never); h != nil {
			return h.IP, false, nil
		}
		if err := e.refuseWhileWaiting(tx, now); err != nil {
			return netip.Addr{}, false, err
		}
		ip, err = e.findFree(tx, i, req.Identity, now)
		return ip, true, err
	}
	cur, err := tx.Get(want)
	if err != nil {
		return netip.Addr{}, false, err
	}
	// A cooling address goes only to the identity that last held it until
	// its delay has passed (Housekeep dropped the ones past it): stale DNS
	// records and conntrack entries for that pod must not reach anyone
	// else.
	isHeld := slices.ContainsFunc(held, func(h *reservation.Record) bool { return h.IP == want })
	mayTake := cur == nil || isHeld ||
		(cur.State == reservation.Cooling && !req.Identity.IsZero() && cur.LastIdentity.Same(req.Identity))
	if !mayTake {
		return netip.Addr{}, false, fmt.Errorf("%w: %s is %s", ErrIPUnavailable, want, holderPhrase(cur))
	}
	if cur == nil { // free as far as the store knows: maybe not while it waits
		if err := e.refuseWhileWaiting(tx, now); err != nil {
			return netip.Addr{}, false, err
		}
	}
	return want, false, nil
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
