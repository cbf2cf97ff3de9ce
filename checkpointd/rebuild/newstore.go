package rebuild

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// EventReclaimed is the reason of the Event on the Node when a node without
// a store got one from its placement entries.
const EventReclaimed = "IPAMStoreReclaimed"

// lookedBy starts the wait a look ends (boltstore.Wait.By): checkpointd
// has read what the cluster holds for the node, and nothing is to be taken
// back.
const lookedBy = "checkpointd looked at the cluster: "

// newStore runs when the data directory has no store, nor a sign that it
// had one (a new node, or one re-installed under the same name): it looks
// at what the cluster holds for the node before any address is handed out.
//
//   - placement off (no Index): nothing to read; a wait is ended at once
//     (a one-shot rebuild, without API, leaves it to the daemon);
//   - the API server away: the wait holds (started, or extended) until it
//     answers, at most the networks' reservation.maxDuration from its start
//     (no reservation can outlive that), as a store rebuilt without it
//     waits; the API server answers but the Node is not known: the wait is
//     left as it is (the plugin's own bound, ipam.newStoreWait);
//   - the node's NodeRecord (one read) holds no entry written under its
//     Node's UID: a new node, or a Node deleted and registered again; the
//     wait ends;
//   - it holds entries: a new store is made (Store.Rebuild) with what the
//     node's own sources show and the reservations decide takes back,
//     which ends the wait.
//
// It reports whether a store was made.
func (b *Rebuilder) newStore(ctx context.Context) bool {
	now := b.cfg.Now()
	w, waiting := b.cfg.Store.NewStoreWait()
	since := now
	if waiting && w.Since.Before(now) {
		since = w.Since
	}
	if waiting && !w.Holds(now) && strings.HasPrefix(w.By, lookedBy) {
		b.cfg.Metrics.StoreReclaimWaiting.Set(0)
		return false // looked before: nothing to take back
	}
	if b.cfg.API == nil {
		return false // a one-shot rebuild (checkpointd rebuild-store): the daemon's to decide
	}
	if b.cfg.Index == nil {
		if waiting && w.Holds(now) {
			b.endWait(since, "no NodeRecord to read (--placement=false)")
		}
		return false
	}
	up, _ := b.cfg.API.Reachable()
	node := b.node()
	switch {
	case !up:
		b.holdNew(since, "the API server has not answered yet")
		return false
	case node == nil:
		b.once("newstore", fmt.Sprintf("no store on this node, and its Node is not known to checkpointd yet (not registered, or --node-name is not the kubelet's): "+
			"what the cluster holds for it is read once it is (ipam.newStoreWait bounds the wait meanwhile: %s)", waitState(w, waiting, now)))
		return false
	}
	entries, err := b.cfg.Index.ReadOwn(ctx, node)
	var refused apierrors.APIStatus
	switch {
	case errors.As(err, &refused):
		b.endWait(since, "the API server refused this node's NodeRecord ("+err.Error()+"): nothing can be taken back")
		return false
	case err != nil:
		b.holdNew(since, "its NodeRecord could not be read: "+err.Error())
		return false
	case !slices.ContainsFunc(entries, func(e IndexEntry) bool { return !e.Disowned }):
		b.endWait(since, fmt.Sprintf("Node %s (uid %s) has no NodeRecord entries of its own: nothing to take back (a new node, or its Node registered again)",
			node.Name, node.UID))
		return false
	}
	return b.reclaim(ctx, node, entries, since)
}

// reclaim makes the new store of a node whose NodeRecord holds entries:
// the node's own sources (MakePlan: on a re-installed node, what runs
// already), and the reservations its entries give back (decide). What
// stops it holds the wait and is tried again at the next pass.
func (b *Rebuilder) reclaim(ctx context.Context, node *corev1.Node, entries []IndexEntry, since time.Time) bool {
	now := b.cfg.Now()
	confs, err := b.cfg.Store.Networks()
	if err != nil {
		b.holdNew(since, "the networks' configs are needed: "+err.Error())
		return false
	}
	src, err := b.gather(ctx)
	if err != nil {
		b.holdNew(since, "the node's own sources are needed: "+err.Error())
		return false
	}
	plan := MakePlan(src, confs, now)
	if plan.Wait != "" {
		b.holdNew(since, plan.Wait)
		return false
	}
	r := newRestorer(confs, runningOf(confs, plan), now)
	r.podCIDRs, r.reinstalled, r.start = podCIDRs(node), true, since
	r.restoreInto(plan, entries, src.Checkpoints)
	_, reports, err := b.cfg.Store.Rebuild(confs, plan.Networks)
	switch {
	case errors.Is(err, boltstore.ErrUsable):
		b.cfg.Log.Warn("a store was created before this node's placement entries were read (the wait ran out first): nothing taken back",
			"store", b.cfg.Store.Path())
		return false
	case err != nil:
		b.holdNew(since, "the new store could not be written: "+err.Error())
		return false
	}
	b.once("newstore", "")
	b.reportReclaimed(node, entries, reports, src, append(plan.Notes, r.notes...), b.cfg.Now().Sub(since))
	return true
}

// holdNew holds back a new store while checkpointd cannot read what the
// cluster holds for the node (why): the wait is started, or extended, to
// the networks' reservation.maxDuration from its start. Said once per
// reason.
func (b *Rebuilder) holdNew(since time.Time, why string) {
	b.cfg.Metrics.StoreReclaimWaiting.Set(1)
	maxDur, err := b.cfg.Store.MaxDuration()
	if err != nil {
		b.once("newstore-max", "reservation.maxDuration of the networks not read, the default is used: "+err.Error())
		maxDur = contract.DefaultMaxDuration
	}
	until := since.Add(maxDur)
	b.once("newstore", fmt.Sprintf("no store on this node, and this node's placement entries are not read yet (%s): no address is handed out until they are, or until %s",
		why, until.UTC().Format(time.RFC3339)))
	if w, ok := b.cfg.Store.NewStoreWait(); ok && !w.Until.Before(until) {
		return
	}
	if _, err := b.cfg.Store.HoldNew(boltstore.Wait{Since: since, Until: until,
		By: "checkpointd, until this node's placement entries are read (" + why + "; at most reservation.maxDuration " + maxDur.String() + ")"}); err != nil {
		b.once("newstore-hold", "a new store cannot be held back: "+err.Error())
	}
}

// endWait ends the wait of a new store: checkpointd has looked, and nothing
// is to be taken back (why). The ended wait stays in the data directory
// until the first call creates the store, so that call does not wait.
func (b *Rebuilder) endWait(since time.Time, why string) {
	b.cfg.Metrics.StoreReclaimWaiting.Set(0)
	b.once("newstore", "")
	now := b.cfg.Now()
	if _, err := b.cfg.Store.HoldNew(boltstore.Wait{Since: since, Until: now, By: lookedBy + why}); err != nil {
		b.once("newstore-hold", "the wait of a new store cannot be ended: "+err.Error())
		return
	}
	b.cfg.Log.Info("no store on this node: "+why, "store", b.cfg.Store.Path())
}

// waitState says what holds a new store back, for messages.
func waitState(w boltstore.Wait, ok bool, now time.Time) string {
	if !ok || !w.Holds(now) {
		return "nothing holds it back"
	}
	return "held back until " + w.Until.UTC().Format(time.RFC3339) + " by " + w.By
}

// reportReclaimed says what a new store made from the node's placement
// entries holds: a log line, each note, an Event on the Node, the metrics.
func (b *Rebuilder) reportReclaimed(node *corev1.Node, entries []IndexEntry, reports map[string]ipam.RebuildReport, src Sources, notes []string, took time.Duration) {
	m := b.cfg.Metrics
	m.StoreReclaims.Inc()
	m.StoreReclaimSeconds.Set(took.Seconds())
	m.StoreReclaimWaiting.Set(0)
	var unplaced []string
	for n, rep := range reports {
		for _, p := range rep.Problems {
			unplaced = append(unplaced, "network "+n+": "+p)
		}
	}
	m.StoreUnplaced.Add(float64(len(unplaced)))
	b.cfg.Log.Warn("IPAM store made from this node's NodeRecord entries (the node had no store: re-installed?)", "store", b.cfg.Store.Path(),
		"node", node.Name, "entries", len(entries), "from", sourcesSummary(src, entries), "networks", totals(reports),
		"unplaced", len(unplaced), "took", took.Round(time.Millisecond).String())
	for _, u := range unplaced {
		b.cfg.Log.Warn("IPAM store made without", "what", u)
	}
	var not []string
	for _, n := range notes {
		if n != "" {
			b.cfg.Log.Info("IPAM store made from the NodeRecord", "note", n)
			not = append(not, n)
		}
	}
	msg := fmt.Sprintf("stickyip had no store on this node, whose NodeRecord holds entries: made one from the node's %d entries there and %s, %s after the node's first look: %s.",
		len(entries), sourcesSummary(src, nil), took.Round(100*time.Millisecond), totals(reports))
	if len(not) > 0 {
		msg += fmt.Sprintf(" Not taken back (%d): %s.", len(not), strings.Join(not, "; "))
	}
	msg += unplacedSummary(unplaced)
	b.say(corev1.EventTypeNormal, EventReclaimed, msg)
}
