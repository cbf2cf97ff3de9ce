package rebuild

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// maxEventMessage bounds an Event's message (the API server refuses one
// over 1 KiB... and nobody reads more): the log has every line.
const maxEventMessage = 1000

// reportRebuilt says what a rebuild did: a log line, each note at warning
// level, an Event on the Node, the metrics.
func (b *Rebuilder) reportRebuilt(why error, rep boltstore.Replaced, reports map[string]ipam.RebuildReport, src Sources,
	index []IndexEntry, notes []string, took time.Duration) {
	m := b.cfg.Metrics
	m.StoreRebuilds.Inc()
	m.StoreRebuildSeconds.Set(took.Seconds())
	m.StoreDamaged.Set(0)
	b.damagedSince = time.Time{}
	var unplaced []string
	for _, n := range slices.Sorted(maps.Keys(reports)) {
		for _, p := range reports[n].Problems {
			unplaced = append(unplaced, "network "+n+": "+p)
		}
	}
	notes = slices.DeleteFunc(notes, func(s string) bool { return s == "" })
	m.StoreUnplaced.Add(float64(len(unplaced)))
	waiting := b.setWaiting()
	from := sourcesSummary(src, index)
	kept := "it was missing"
	if rep.Aside != "" {
		kept = "the damaged file is kept as " + rep.Aside
	}
	b.cfg.Log.Warn("IPAM store rebuilt", "store", b.cfg.Store.Path(), "was", rep.Why, "kept", rep.Aside, "from", from,
		"networks", totals(reports), "unplaced", len(unplaced), "waitingForIndex", waiting, "took", took.Round(time.Millisecond).String())
	for _, u := range unplaced {
		b.cfg.Log.Warn("IPAM store rebuilt without", "what", u)
	}
	for _, n := range notes {
		b.cfg.Log.Info("IPAM store rebuild", "note", n)
	}
	msg := fmt.Sprintf("stickyip's store %s could not be used (%v); %s. Rebuilt from %s: %s.", b.cfg.Store.Path(), why, kept, from, totals(reports))
	if waiting {
		msg += " The API server is away: the reservations only the NodeRecord holds are restored when it answers; meanwhile no new address is handed out."
	}
	msg += unplacedSummary(unplaced)
	b.say(corev1.EventTypeWarning, EventRebuilt, msg)
}

// setWaiting sets the waiting gauge from the store and returns it.
func (b *Rebuilder) setWaiting() bool {
	w, err := b.cfg.Store.Waiting()
	waiting := err == nil && len(w) > 0
	v := 0.0
	if waiting {
		v = 1
	}
	b.cfg.Metrics.StoreRebuildWaiting.Set(v)
	return waiting
}

// say posts an Event on the Node, now or once the API server answers.
func (b *Rebuilder) say(kind, reason, msg string) {
	if len(msg) > maxEventMessage {
		msg = msg[:maxEventMessage-len(" (… see checkpointd's log)")] + " (… see checkpointd's log)"
	}
	b.unsaid = append(b.unsaid, event{kind, reason, msg})
	b.flushEvents()
}

// flushEvents posts the Events not posted yet, when the Node is known.
func (b *Rebuilder) flushEvents() {
	if b.cfg.Node == nil || len(b.unsaid) == 0 {
		return
	}
	if b.cfg.API != nil {
		if up, _ := b.cfg.API.Reachable(); !up {
			return
		}
	}
	node, ok := b.cfg.Node.Node()
	if !ok {
		return
	}
	for _, e := range b.unsaid {
		b.cfg.Node.NodeEvent(node, e.kind, e.reason, e.msg)
	}
	b.unsaid = nil
}

// sourcesSummary names each source and how much it gave.
func sourcesSummary(src Sources, index []IndexEntry) string {
	ready, seen := 0, 0
	for _, sb := range src.Sandboxes {
		if sb.Ready {
			ready++
		}
		if sb.Addrs != nil {
			seen++
		}
	}
	parts := []string{
		fmt.Sprintf("the runtime's %d sandboxes (%d running)", len(src.Sandboxes), ready),
		fmt.Sprintf("%d network namespaces", seen),
		fmt.Sprintf("%d CNI results", len(src.Cache)),
		fmt.Sprintf("%d checkpoints", len(src.Checkpoints)),
	}
	if index != nil {
		parts = append(parts, fmt.Sprintf("%d NodeRecord entries", len(index)))
	}
	return strings.Join(parts, ", ")
}

// totals says what each network holds.
func totals(reports map[string]ipam.RebuildReport) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(reports)) {
		r := reports[n]
		parts = append(parts, fmt.Sprintf("network %s: %d allocated, %d reserved, %d cooling", n, r.Allocated, r.Reserved, r.Cooling))
	}
	if len(parts) == 0 {
		return "no stickyip network"
	}
	return strings.Join(parts, "; ")
}

func unplacedSummary(unplaced []string) string {
	if len(unplaced) == 0 {
		return ""
	}
	return fmt.Sprintf(" Not placed (%d): %s.", len(unplaced), strings.Join(unplaced, "; "))
}
