package main

import (
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// switchRounds is how many nodes workload 6 switches (each a fresh store).
const switchRounds = 3

// workloadSwitch times the first ADD on a node whose host-local data holds a
// full /16 (65,512 allocations): for stickyip it imports all of them in that
// ADD (hostLocalDataDir), which the runtime waits for; for host-local it is
// an ADD on its own full data directory. Target: stickyip's ≤ 2 s.
func (b *bench) workloadSwitch() error {
	first := map[string]samples{}
	for round := 0; round < switchRounds; round++ {
		ts, err := b.targets("switch", "10.102.0.0/16")
		if err != nil {
			return err
		}
		for _, t := range ts {
			_, subnet, err := net.ParseCIDR(t.subnet)
			if err != nil {
				return err
			}
			dir := filepath.Join(t.dir, t.network)
			if t.kind == kindStickyIP {
				dir = filepath.Join(filepath.Dir(t.dir), "host-local", t.network)
				t.hostLocalDir = filepath.Dir(dir)
			}
			seeded, _, err := seedHostLocal(dir, subnet, 20)
			if err != nil {
				return err
			}
			// On a node that ran host-local its files are on disk long
			// since, and nothing else runs: the call is timed without the
			// writeback of 65,000 files just written, or this process's
			// collector going through what seeding them allocated, taking
			// a core beside it.
			syscall.Sync()
			runtime.GC()
			p := newPod("switch", round)
			if err := t.prepare(p); err != nil {
				return err
			}
			r := t.call("ADD", p)
			if r.err != nil {
				return r.err
			}
			for _, ip := range r.ips {
				if seeded[ip.String()] {
					return fmt.Errorf("%s handed out %s, which host-local had allocated", t.kind, ip)
				}
			}
			first[t.kind] = append(first[t.kind], r.elapsed)
			if t.kind == kindStickyIP {
				n, err := countEntries(t, "")
				if err != nil {
					return err
				}
				if n != len(seeded)+1 {
					return fmt.Errorf("after the first ADD stickyip lists %d entries, want the %d imported and the new pod", n, len(seeded))
				}
				b.report.note(fmt.Sprintf("Switch round %d: stickyip's first ADD imported %d host-local allocations in %s.",
					round+1, len(seeded), r.elapsed.Round(time.Millisecond)))
			}
		}
	}
	b.report.latency("6. switching a full /16 from host-local", "first ADD (stickyip: imports 65,512 allocations)", first)
	b.report.targetSeconds("First ADD after switching a full /16 from host-local, median", first, 2.0)
	b.report.targetRatio("First ADD after switching a full /16 (stickyip: with the import) ÷ host-local's own first ADD there, median", first, 0.5)
	return nil
}
