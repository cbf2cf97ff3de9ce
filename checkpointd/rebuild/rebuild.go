package rebuild

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// Store is the IPAM store as a rebuild uses it (checkpointd/ipamstore).
type Store interface {
	Health() error
	Damage() error
	Path() string
	Networks() (map[string]*ipam.Config, error)
	Entries() ([]reservation.Entry, error)
	Rebuild(confs map[string]*ipam.Config, plan map[string]ipamstore.NetworkRebuild) (boltstore.Replaced, map[string]ipam.RebuildReport, error)
	Waiting() (map[string]time.Time, error)
	RestoreReservations(restored map[string][]ipam.Restored, networks []string) (map[string]ipam.RebuildReport, error)
	// A data directory without a store (newStore).
	Missing() bool
	NewStoreWait() (boltstore.Wait, bool)
	HoldNew(w boltstore.Wait) (bool, error)
	MaxDuration() (time.Duration, error)
}

// Runtime is the container runtime (checkpointd/cri).
type Runtime interface {
	Sandboxes(ctx context.Context) ([]cri.Sandbox, error)
	Status(ctx context.Context, id string) (cri.Status, error)
}

// API says whether the API server answers (checkpointd/kube).
type API interface {
	Reachable() (bool, time.Time)
}

// Node is the node's own Node and a way to post Events on it.
type Node interface {
	Node() (*corev1.Node, bool)
	NodeEvent(node *corev1.Node, eventType, reason, message string)
}

// Event reasons on the Node.
const (
	EventRebuilt  = "IPAMStoreRebuilt"
	EventRestored = "IPAMStoreReservationsRestored"
	EventDamaged  = "IPAMStoreDamaged"
)

// Config configures a Rebuilder.
type Config struct {
	// Enabled: rebuild (--rebuild-store); otherwise the damage is only
	// reported (metric, log, Event) and the node stays NotReady.
	Enabled    bool
	Store      Store
	Runtime    Runtime
	ResultsDir string // the runtime's CNI result cache
	// Checkpoints lists the saved pods (nil: none).
	Checkpoints func() ([]*checkpoint.Record, error)
	Index       Index // nil: no NodeRecord
	API         API   // nil: the API server never answers (a one-shot rebuild)
	Node        Node  // nil: no Events
	Metrics     *metrics.Metrics
	Log         *slog.Logger
	Now         func() time.Time
	// NetnsAddrs reads a network namespace's addresses (default NetnsAddrs).
	NetnsAddrs func(path string) (map[string][]netip.Addr, error)
}

// Rebuilder watches the IPAM store and rebuilds it when no call can use it.
// Only the reconcile loop's goroutine calls it.
type Rebuilder struct {
	cfg Config
	// suspect: a reader found damage the cheap check may miss: the next
	// pass checks every record.
	suspect bool
	// damagedSince is when the current damage was first seen (zero: none).
	damagedSince time.Time
	// said is the last message logged per topic (logged once until it changes).
	said map[string]string
	// unsaid are Events not yet posted (the API server was away).
	unsaid []event
}

type event struct{ kind, reason, msg string }

// New returns a Rebuilder.
func New(cfg Config) *Rebuilder {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	if cfg.NetnsAddrs == nil {
		cfg.NetnsAddrs = NetnsAddrs
	}
	return &Rebuilder{cfg: cfg, said: map[string]string{}}
}

// Suspect tells the rebuilder that a read of the store failed: the next
// pass checks it whole.
func (b *Rebuilder) Suspect(err error) {
	if errors.Is(err, reservation.ErrCorrupt) || errors.Is(err, reservation.ErrLost) {
		b.suspect = true
	}
}

// Pass checks the store once and, when no call can use it, rebuilds it;
// when a rebuilt store waits for the NodeRecord and the API server
// answers, it restores the record's reservations; when the node has no
// store at all, it looks at what the cluster holds for it first
// (newStore). It never returns an error: what fails is logged and tried
// again by the next pass. It reports whether a store was made.
func (b *Rebuilder) Pass(ctx context.Context) bool {
	b.flushEvents()
	why := b.damage()
	if why == nil {
		b.damagedSince = time.Time{}
		b.cfg.Metrics.StoreDamaged.Set(0)
		if b.cfg.Store.Missing() {
			return b.newStore(ctx)
		}
		b.cfg.Metrics.StoreReclaimWaiting.Set(0)
		b.restoreFromIndex(ctx)
		return false
	}
	now := b.cfg.Now()
	if b.damagedSince.IsZero() {
		b.damagedSince = now
		b.cfg.Log.Error("the IPAM store cannot be used: no pod gets an address on this node until it is rebuilt", "store", b.cfg.Store.Path(), "err", why,
			"rebuild", b.cfg.Enabled)
		if !b.cfg.Enabled {
			b.say(corev1.EventTypeWarning, EventDamaged, fmt.Sprintf("stickyip's store %s cannot be used (%v); checkpointd runs with --rebuild-store=false, "+
				"so the node stays NotReady until the operator acts (docs/troubleshooting.md, \"Error 102\")", b.cfg.Store.Path(), why))
		}
	}
	b.cfg.Metrics.StoreDamaged.Set(1)
	if !b.cfg.Enabled {
		return false
	}
	return b.rebuild(ctx, why)
}

// damage returns what a rebuild repairs, or nil: the cheap check the
// plugin's STATUS makes, then, when it or a reader found something, the
// whole store. Other errors (a newer schema, I/O, a lock) are not a
// rebuild's to repair: they are logged.
func (b *Rebuilder) damage() error {
	err := b.cfg.Store.Health()
	if err == nil && !b.suspect {
		b.once("damage", "")
		return nil
	}
	b.suspect = false
	err = b.cfg.Store.Damage()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, reservation.ErrCorrupt), errors.Is(err, reservation.ErrLost):
		return err
	}
	b.once("damage", "the IPAM store cannot be used, and a rebuild does not repair that: "+err.Error())
	return nil
}

// rebuild gathers the sources, plans and writes the new store, and says
// so. It reports whether the store was rebuilt.
func (b *Rebuilder) rebuild(ctx context.Context, why error) bool {
	start := b.cfg.Now()
	confs, err := b.cfg.Store.Networks()
	if err != nil {
		b.once("wait", "IPAM store not rebuilt yet: the networks' configs are needed: "+err.Error())
		return false
	}
	src, err := b.gather(ctx)
	if err != nil {
		b.once("wait", "IPAM store not rebuilt yet: "+err.Error())
		return false
	}
	plan := MakePlan(src, confs, start)
	if plan.Wait != "" {
		b.once("wait", "IPAM store not rebuilt yet: "+plan.Wait)
		return false
	}
	index, indexNote := b.readIndex(ctx)
	r := newRestorer(confs, runningOf(confs, plan), start)
	r.podCIDRs = podCIDRs(b.node())
	r.restoreInto(plan, index, src.Checkpoints)
	if index == nil && b.cfg.Index != nil && indexNote == "" {
		for n, c := range confs {
			nr := plan.Networks[n]
			nr.WaitUntil = start.Add(c.Reservation.MaxDuration)
			plan.Networks[n] = nr
		}
	}
	replaced, reports, err := b.cfg.Store.Rebuild(confs, plan.Networks)
	switch {
	case errors.Is(err, boltstore.ErrUsable):
		b.cfg.Log.Info("the IPAM store can be used again (repaired or replaced meanwhile): not rebuilt", "store", b.cfg.Store.Path())
		return false
	case err != nil:
		b.once("wait", "IPAM store not rebuilt: "+err.Error())
		return false
	}
	b.once("wait", "")
	notes := append(append(plan.Notes, r.notes...), indexNote)
	b.reportRebuilt(why, replaced, reports, src, index, notes, b.cfg.Now().Sub(b.damagedSince))
	return true
}

// readIndex reads the node's own placement entries when the API server
// answers. It returns nil entries with an empty note when the record is to
// be read later (the API server is away: the rebuilt store waits for it),
// and nil entries with a note when there is none to read.
func (b *Rebuilder) readIndex(ctx context.Context) ([]IndexEntry, string) {
	if b.cfg.Index == nil {
		return nil, "no NodeRecord read (placement off, or checkpointd rebuild-store): the reservations of deleted pods come from the checkpoints and the sandboxes the runtime still lists only"
	}
	if b.cfg.API == nil {
		return nil, ""
	}
	if up, _ := b.cfg.API.Reachable(); !up {
		return nil, ""
	}
	entries, err := b.cfg.Index.ReadOwn(ctx, b.node())
	var refused apierrors.APIStatus
	switch {
	case err == nil:
		if entries == nil {
			entries = []IndexEntry{}
		}
		return entries, ""
	case errors.As(err, &refused):
		return nil, "the API server refused to give this node's NodeRecord (" + err.Error() + "): reservations only it held are lost"
	}
	b.cfg.Log.Warn("NodeRecord not read; the rebuilt store waits for it", "err", err)
	return nil, ""
}

// node returns the node's Node as the watch last saw it (nil: unknown).
func (b *Rebuilder) node() *corev1.Node {
	if b.cfg.Node == nil {
		return nil
	}
	n, ok := b.cfg.Node.Node()
	if !ok {
		return nil
	}
	return n
}

// gather reads the node's own sources. The runtime's list and the result
// cache's directory must be readable; one sandbox's status or namespace
// that cannot be read is recorded with it (MakePlan decides).
func (b *Rebuilder) gather(ctx context.Context) (Sources, error) {
	var src Sources
	sbs, err := b.cfg.Runtime.Sandboxes(ctx)
	if err != nil {
		return src, err
	}
	for _, sb := range sbs {
		s := Sandbox{Sandbox: sb}
		s.Status, s.StatusErr = b.cfg.Runtime.Status(ctx, sb.ID)
		path := s.Status.Netns
		if path == "" && s.Status.Pid > 0 {
			path = "/proc/" + strconv.Itoa(s.Status.Pid) + "/ns/net"
		}
		switch {
		case s.Status.HostNetwork:
		case path == "":
			s.AddrsErr = errors.New("the runtime names no network namespace")
		default:
			s.Addrs, s.AddrsErr = b.cfg.NetnsAddrs(path)
		}
		src.Sandboxes = append(src.Sandboxes, s)
	}
	if src.Cache, src.CacheProblems, err = contract.ReadCNICache(b.cfg.ResultsDir); err != nil {
		return src, err
	}
	if b.cfg.Checkpoints != nil {
		if src.Checkpoints, err = b.cfg.Checkpoints(); err != nil {
			b.cfg.Log.Warn("checkpoints not read: the rebuild keeps no reservation from them", "err", err)
		}
	}
	return src, nil
}

// once logs msg (an error) when it differs from the last one of topic; an
// empty msg forgets the topic.
func (b *Rebuilder) once(topic, msg string) {
	if b.said[topic] == msg {
		return
	}
	b.said[topic] = msg
	if msg != "" {
		b.cfg.Log.Error(msg + "; will retry")
	}
}
