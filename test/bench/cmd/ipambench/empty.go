package main

import "fmt"

// workloadEmpty is workload 1: ADD then DEL in an empty /16, and each
// binary's process start (a CNI VERSION call, which reads nothing but its
// stdin): the floor under every call of that plugin, in the same run.
func (b *bench) workloadEmpty() error {
	ts, err := b.targets("bench-empty", "10.244.0.0/16")
	if err != nil {
		return err
	}
	add, del, pair, start := map[string]samples{}, map[string]samples{}, map[string]samples{}, map[string]samples{}
	floor, err := buildGoFloor(b.cfg.work)
	if err != nil {
		b.report.problem(err.Error() + " (the Go floor is not measured)")
	}
	var floorTimes samples
	// One untimed pair per plugin: the first run of a binary pays for page faults.
	if err := interleaved(ts, 1, func(t *target, i int) error {
		a, d := addDel(t, newPod("warm1", i))
		return firstErr(a.err, d.err)
	}); err != nil {
		return err
	}
	err = interleaved(ts, b.cfg.nEmpty, func(t *target, i int) error {
		a, d := addDel(t, newPod("empty", i))
		if err := firstErr(a.err, d.err); err != nil {
			return err
		}
		v := t.call("VERSION", newPod("empty", i))
		if v.err != nil {
			return v.err
		}
		add[t.kind] = append(add[t.kind], a.elapsed)
		del[t.kind] = append(del[t.kind], d.elapsed)
		pair[t.kind] = append(pair[t.kind], a.elapsed+d.elapsed)
		start[t.kind] = append(start[t.kind], v.elapsed)
		if floor != "" && t.kind == kindHostLocal {
			f := t.callAs("Go floor", floor, "VERSION", newPod("empty", i))
			if f.err != nil {
				return f.err
			}
			floorTimes = append(floorTimes, f.elapsed)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.report.latency("1. empty /16", "ADD", add)
	b.report.latency("1. empty /16", "DEL", del)
	b.report.latency("1. empty /16", "ADD+DEL", pair)
	b.report.latency("1. process start", "VERSION (the floor: start, read stdin, print, exit)", start)
	b.report.targetRatio("Empty /16 ADD+DEL median", pair, 1.0)
	b.report.targetRatio("Empty /16 DEL median", del, 0.7)
	if hl := del[kindHostLocal]; len(floorTimes) > 0 && len(hl) > 0 {
		ratio := func(s samples) string {
			if len(s) == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", float64(s.median())/float64(hl.median()))
		}
		b.report.note(fmt.Sprintf("Go floor (workload 1): the smallest Go CNI plugin (answers VERSION, nothing else; built here with the go on PATH, no cgo, -trimpath, -s -w) "+
			"ran in %s median over %d calls in the same loop: %s of host-local's DEL median (%s). stickyip's VERSION is %s of it, its DEL %s.",
			fmtDur(floorTimes.median()), len(floorTimes), ratio(floorTimes), fmtDur(hl.median()), ratio(start[kindStickyIP]), ratio(del[kindStickyIP])))
	}
	b.report.note("Workload 1: a DEL of stickyip is journaled, not synced (docs/reliability.md, \"What a DEL guarantees\"); the next ADD commits it with its own change, synced. " +
		"The VERSION row is each binary's process start alone: no call of that plugin can be faster, and the DEL target (≤ 0.70 of host-local's DEL) is below stickyip's own start wherever stickyip does not start faster than host-local by 30% or more.")
	return nil
}
