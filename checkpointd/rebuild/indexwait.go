package rebuild

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/ipam"
)

// restoreFromIndex restores the record's reservations into the networks of
// a rebuilt store that wait for them, once the API server answers.
func (b *Rebuilder) restoreFromIndex(ctx context.Context) {
	if b.cfg.Index == nil {
		return
	}
	waiting, err := b.cfg.Store.Waiting()
	if err != nil || len(waiting) == 0 {
		b.cfg.Metrics.StoreRebuildWaiting.Set(0)
		return
	}
	b.cfg.Metrics.StoreRebuildWaiting.Set(1)
	index, note := b.readIndex(ctx)
	if index == nil && note == "" {
		return // the API server is still away
	}
	confs, err := b.cfg.Store.Networks()
	if err != nil {
		b.once("restore", "NodeRecord's reservations not restored yet: "+err.Error())
		return
	}
	entries, err := b.cfg.Store.Entries()
	if err != nil {
		b.once("restore", "NodeRecord's reservations not restored yet: "+err.Error())
		return
	}
	var recs []*checkpoint.Record
	if b.cfg.Checkpoints != nil {
		recs, _ = b.cfg.Checkpoints() // durations of '-' entries only: none read is none known
	}
	r := newRestorer(confs, storeHolders(entries), b.cfg.Now())
	r.podCIDRs = podCIDRs(b.node())
	restored := map[string][]ipam.Restored{}
	dur := r.durations(recs)
	for _, e := range index {
		merge(restored, r.fromIndex(e, dur))
	}
	reports, err := b.cfg.Store.RestoreReservations(restored, slices.Sorted(maps.Keys(waiting)))
	if err != nil {
		b.once("restore", "NodeRecord's reservations not restored yet: "+err.Error())
		return
	}
	b.once("restore", "")
	b.setWaiting()
	var unplaced []string
	n := 0
	for _, net := range slices.Sorted(maps.Keys(reports)) {
		for _, p := range reports[net].Problems {
			unplaced = append(unplaced, "network "+net+": "+p)
		}
		n += len(restored[net])
	}
	notes := append(r.notes, note)
	b.cfg.Metrics.StoreUnplaced.Add(float64(len(unplaced)))
	b.cfg.Log.Warn("IPAM store: the NodeRecord's reservations restored", "entries", len(index), "restored", n,
		"networks", totals(reports), "unplaced", len(unplaced))
	for _, u := range append(unplaced, notes...) {
		if u != "" {
			b.cfg.Log.Warn("IPAM store restore", "note", u)
		}
	}
	b.say(corev1.EventTypeNormal, EventRestored, fmt.Sprintf("the API server answers: %d reservations of the node's %d NodeRecord entries restored into the rebuilt store (%s); new addresses are handed out again.%s",
		n, len(index), totals(reports), unplacedSummary(unplaced)))
}
