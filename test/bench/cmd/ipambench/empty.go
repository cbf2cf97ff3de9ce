package main

import (
	"fmt"
	"os"
	"path/filepath"
)

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
	if err == nil {
		floor, err = installCopy(floor, filepath.Join(b.cfg.work, "bin"), "gofloor") // as the plugins (installCopies)
	}
	if err != nil {
		b.report.problem(err.Error() + " (the Go floor is not measured)")
		floor = ""
	}
	var floorTimes, cniAdd, cniDel samples
	cniFloor := b.cfg.cniFloorBin
	if _, err := os.Stat(cniFloor); err != nil {
		b.report.problem(fmt.Sprintf("the CNI floor is not measured: %v (make bench-tools builds it)", err))
		cniFloor = ""
	}
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
		if cniFloor != "" && t.kind == kindHostLocal {
			p := newPod("cnifloor", i)
			if err := t.prepare(p); err != nil {
				return err
			}
			a, d := t.callAs("CNI floor", cniFloor, "ADD", p), t.callAs("CNI floor", cniFloor, "DEL", p)
			if err := firstErr(a.err, d.err); err != nil {
				return err
			}
			cniAdd, cniDel = append(cniAdd, a.elapsed), append(cniDel, d.elapsed)
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
	b.report.targetRatio("Empty /16 DEL median", del, 1.0)
	b.report.targetRatio("Empty /16 ADD median", add, 0.9)
	// ratioTo returns s's median as a fraction of ref's.
	ratioTo := func(s, ref samples) string {
		if len(s) == 0 || len(ref) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", float64(s.median())/float64(ref.median()))
	}
	if hl := del[kindHostLocal]; len(floorTimes) > 0 && len(hl) > 0 {
		b.report.note(fmt.Sprintf("Go floor (workload 1): the smallest Go CNI plugin (answers VERSION, nothing else; built here with the go on PATH, no cgo, -trimpath, -s -w) "+
			"ran in %s median over %d calls in the same loop: %s of host-local's DEL median (%s). stickyip's VERSION is %s of it, its DEL %s.",
			fmtDur(floorTimes.median()), len(floorTimes), ratioTo(floorTimes, hl), fmtDur(hl.median()), ratioTo(start[kindStickyIP], hl), ratioTo(del[kindStickyIP], hl)))
	}
	if hlAdd, hlDel := add[kindHostLocal], del[kindHostLocal]; len(cniDel) > 0 && len(hlDel) > 0 {
		b.report.note(fmt.Sprintf("CNI floor (workload 1): the smallest plugin on the CNI library's skel (test/bench/cmd/cnifloor: skel's environment, stdin, "+
			"config name and version checks and CNI_NETNS check; ADD prints a fixed result, DEL does nothing; built as stickyip is) "+
			"ran its ADD in %s and its DEL in %s median over %d pairs in the same loop: %s of host-local's ADD, %s of its DEL. "+
			"Above it, host-local's own work is %s of its ADD and %s of its DEL; stickyip's own (config, log, store, result) %s and %s.",
			fmtDur(cniAdd.median()), fmtDur(cniDel.median()), len(cniDel), ratioTo(cniAdd, hlAdd), ratioTo(cniDel, hlDel),
			diffTo(hlAdd, cniAdd, hlAdd), diffTo(hlDel, cniDel, hlDel), diffTo(add[kindStickyIP], cniAdd, hlAdd), diffTo(del[kindStickyIP], cniDel, hlDel)))
	}
	b.report.note("Workload 1: a DEL of stickyip is journaled, not synced (test/reliability/README.md, \"What a DEL guarantees\"); the next ADD commits it with its own change, synced. " +
		"Every ADD of stickyip commits, with two fdatasyncs (host-local syncs nothing): the ADD target (≤ 0.90 of host-local's ADD) moves with the disk's sync latency. " +
		"The VERSION row is each binary's process start alone: no call of that plugin can be faster.")
	return nil
}

// diffTo returns (a's median - b's median) as a fraction of ref's median.
func diffTo(a, b, ref samples) string {
	if len(a) == 0 || len(b) == 0 || len(ref) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", float64(a.median()-b.median())/float64(ref.median()))
}
