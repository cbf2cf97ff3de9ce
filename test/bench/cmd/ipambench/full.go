package main

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// workloadFull is workload 2: ADD into a /16 that is 99.98% full, and DEL of an unknown
// container with 60,000 allocations.
func (b *bench) workloadFull() error {
	_, subnet, _ := net.ParseCIDR("10.245.0.0/16")
	pool := len(hostLocalPool(subnet))
	free := pool * 2 / 10000 // 0.02%
	ts, err := b.targets("bench-full", subnet.String())
	if err != nil {
		return err
	}
	var seeded map[string]bool
	for _, t := range ts {
		if seeded, err = b.seed(t, free); err != nil {
			return err
		}
	}
	b.report.note(fmt.Sprintf("Workload 2: %d of %d addresses allocated (%.3f%% full), %d free, spread evenly; "+
		"last_reserved_ip.0 names a free one, so each host-local ADD scans one gap of ~%d taken addresses.",
		len(seeded), pool, 100*float64(len(seeded))/float64(pool), free, pool/free))

	add, del := map[string]samples{}, map[string]samples{}
	bad := map[string]int{}
	err = interleaved(ts, b.cfg.nFull+1, func(t *target, i int) error {
		a, d := addDel(t, newPod("full", i))
		if err := firstErr(a.err, d.err); err != nil {
			return err
		}
		for _, ip := range a.ips {
			if seeded[ip.String()] {
				bad[t.kind]++
			}
		}
		if i == 0 { // warm-up
			return nil
		}
		add[t.kind] = append(add[t.kind], a.elapsed)
		del[t.kind] = append(del[t.kind], d.elapsed)
		return nil
	})
	if err != nil {
		return err
	}
	for k, n := range bad {
		b.report.problem(fmt.Sprintf("workload 2: %s handed out an address already allocated in the seed %d times", k, n))
	}
	b.report.latency("2. 99.98%-full /16", "ADD", add)
	b.report.latency("2. 99.98%-full /16", "DEL (known container)", del)
	b.report.targetRatio("99.98%-full /16 ADD median", add, 0.02)

	// DEL of an unknown container with 60,000 allocations.
	_, subnet60, _ := net.ParseCIDR("10.246.0.0/16")
	ts60, err := b.targets("bench-60k", subnet60.String())
	if err != nil {
		return err
	}
	for _, t := range ts60 {
		if _, err := b.seed(t, freeFor(subnet60, 60000)); err != nil {
			return err
		}
	}
	unknown := map[string]samples{}
	err = interleaved(ts60, b.cfg.nDel+1, func(t *target, i int) error {
		p := newPod("unknown", i)
		if err := t.prepare(p); err != nil {
			return err
		}
		r := t.call("DEL", p)
		if r.err != nil {
			return r.err
		}
		if i > 0 {
			unknown[t.kind] = append(unknown[t.kind], r.elapsed)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.report.latency("2. 60,000 allocations", "DEL (unknown container)", unknown)
	b.report.targetRatio("DEL unknown container, 60k allocations, median", unknown, 0.01)
	return nil
}

// seed fills t's network with all but free addresses, in the plugin's own format:
// host-local files directly; for stickyip the same files imported with the operator
// tool (stickyip import). It returns the seeded addresses.
func (b *bench) seed(t *target, free int) (map[string]bool, error) {
	_, subnet, err := net.ParseCIDR(t.subnet)
	if err != nil {
		return nil, err
	}
	netDir := filepath.Join(t.dir, t.network)
	if t.kind == kindStickyIP {
		netDir = filepath.Join(filepath.Dir(t.dir), "host-local-seed", t.network)
	}
	start := time.Now()
	seeded, _, err := seedHostLocal(netDir, subnet, free)
	if err != nil {
		return nil, err
	}
	wrote := time.Since(start)
	if t.kind == kindStickyIP {
		importStart := time.Now()
		if _, err := t.stickyipTool("import", "--network", t.network, "--from", netDir); err != nil {
			return nil, err
		}
		b.report.note(fmt.Sprintf("stickyip import of %d host-local allocations (the operator tool, one process) took %s.",
			len(seeded), time.Since(importStart).Round(time.Millisecond)))
		n, err := countEntries(t, "")
		if err != nil {
			return nil, fmt.Errorf("checking the import: %w", err)
		}
		if n != len(seeded) {
			return nil, fmt.Errorf("stickyip import of %s: list shows %d entries, want %d", netDir, n, len(seeded))
		}
	}
	b.report.note(fmt.Sprintf("Seeded %d allocations for %s in %s (host-local files written in %s).",
		len(seeded), t.kind, time.Since(start).Round(time.Millisecond), wrote.Round(time.Millisecond)))
	return seeded, nil
}

// listEntry is the part of `stickyip list --json` the driver checks.
type listEntry struct {
	Network string `json:"network"`
	IP      string `json:"ip"`
	State   string `json:"state"`
	Name    string `json:"name"`
}

// countEntries counts t's entries in state ("" = any) with the operator tool.
func countEntries(t *target, state string) (int, error) {
	out, err := t.stickyipTool("list", "--network", t.network, "--json")
	if err != nil {
		return 0, err
	}
	var es []listEntry
	if err := json.Unmarshal(out, &es); err != nil {
		return 0, fmt.Errorf("parsing stickyip list --json: %w", err)
	}
	n := 0
	for _, e := range es {
		if e.Network == t.network && (state == "" || e.State == state) {
			n++
		}
	}
	return n, nil
}
