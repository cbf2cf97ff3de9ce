package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// bench holds the run's settings and collects its results.
type bench struct {
	cfg    config
	netns  string // path of the driver's idle network namespace
	report *report
	seq    int // numbers target directories
}

// newTarget gives kind a fresh data directory and network.
func (b *bench) newTarget(kind, network, subnet string) (*target, error) {
	b.seq++
	root := filepath.Join(b.cfg.work, fmt.Sprintf("%02d-%s-%s", b.seq, network, kind))
	t := &target{
		kind:     kind,
		network:  network,
		subnet:   subnet,
		dir:      filepath.Join(root, "data"),
		netnsDir: filepath.Join(root, "netns"),
		emptyDir: filepath.Join(root, "no-host-local"),

		netnsTarget: b.netns,
	}
	switch kind {
	case kindHostLocal:
		t.bin = b.cfg.hostLocalBin
	case kindStickyIP:
		t.bin = b.cfg.stickyipBin
		if b.cfg.stickyipLog {
			t.logFile = filepath.Join(root, "stickyip.log")
		}
	}
	for _, d := range []string{t.dir, t.netnsDir, t.emptyDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// targets returns one fresh target per enabled plugin, host-local first.
func (b *bench) targets(network, subnet string) ([]*target, error) {
	var ts []*target
	for _, k := range b.cfg.plugins {
		t, err := b.newTarget(k, network, subnet)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// addDel runs ADD then DEL for p and returns both results; the netns file is made first.
func addDel(t *target, p pod) (add, del callResult) {
	if err := t.prepare(p); err != nil {
		return callResult{err: err}, callResult{}
	}
	add = t.call("ADD", p)
	if add.err != nil {
		return add, callResult{}
	}
	del = t.call("DEL", p)
	return add, del
}

// interleaved runs fn for each target on each iteration, alternating which target goes
// first so that neither plugin always runs on a warmer cache.
func interleaved(ts []*target, n int, fn func(t *target, i int) error) error {
	for i := 0; i < n; i++ {
		for j := range ts {
			k := j
			if i%2 == 1 {
				k = len(ts) - 1 - j
			}
			if err := fn(ts[k], i); err != nil {
				return err
			}
		}
	}
	return nil
}

// workloadEmpty is workload 1: ADD then DEL in an empty /16.
func (b *bench) workloadEmpty() error {
	ts, err := b.targets("bench-empty", "10.244.0.0/16")
	if err != nil {
		return err
	}
	add, del, pair := map[string]samples{}, map[string]samples{}, map[string]samples{}
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
		add[t.kind] = append(add[t.kind], a.elapsed)
		del[t.kind] = append(del[t.kind], d.elapsed)
		pair[t.kind] = append(pair[t.kind], a.elapsed+d.elapsed)
		return nil
	})
	if err != nil {
		return err
	}
	b.report.latency("1. empty /16", "ADD", add)
	b.report.latency("1. empty /16", "DEL", del)
	b.report.latency("1. empty /16", "ADD+DEL", pair)
	b.report.targetRatio("Empty /16 ADD+DEL median", pair, 1.0)
	return nil
}

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

// workloadConcurrent is workload 3: 8 concurrent streams, each ADDs its 100 pods then
// DELs them, as a node starting and stopping many pods at once. The plugins take turns
// for several rounds (the machine's load changes over time); the round with the
// median wall time is reported, latencies of all rounds are pooled.
func (b *bench) workloadConcurrent() error {
	rounds := map[string][]concResult{}
	add, del := map[string]samples{}, map[string]samples{}
	for r := 0; r < b.cfg.rounds; r++ {
		ts, err := b.targets(fmt.Sprintf("bench-conc%d", r), "10.247.0.0/16")
		if err != nil {
			return err
		}
		order := ts
		if r%2 == 1 { // alternate which plugin goes first
			order = []*target{}
			for i := len(ts) - 1; i >= 0; i-- {
				order = append(order, ts[i])
			}
		}
		for _, t := range order {
			c, a, d, err := b.concurrent(t, r)
			if err != nil {
				return err
			}
			rounds[t.kind] = append(rounds[t.kind], c)
			add[t.kind] = append(add[t.kind], a...)
			del[t.kind] = append(del[t.kind], d...)
		}
	}
	label := fmt.Sprintf("3. %d×%d concurrent", b.cfg.streams, b.cfg.podsPerStream)
	b.report.latency(label, "ADD", add)
	b.report.latency(label, "DEL", del)
	for k, rs := range rounds {
		sort.Slice(rs, func(i, j int) bool { return rs[i].wall < rs[j].wall })
		med := rs[(len(rs)-1)/2]
		for _, c := range rs {
			med.errors = max(med.errors, c.errors)
			med.duplicates = max(med.duplicates, c.duplicates)
			med.allWalls = append(med.allWalls, c.wall)
		}
		b.report.concurrency(k, med)
	}
	return nil
}

func (b *bench) concurrent(t *target, round int) (concResult, samples, samples, error) {
	streams, perStream := b.cfg.streams, b.cfg.podsPerStream
	pods := make([][]pod, streams)
	for s := range pods {
		for i := 0; i < perStream; i++ {
			p := newPod(fmt.Sprintf("conc%d-%d", round, s), i)
			if err := t.prepare(p); err != nil {
				return concResult{}, nil, nil, err
			}
			pods[s] = append(pods[s], p)
		}
	}
	type streamOut struct {
		add, del samples
		holds    []holding
		errs     []error
	}
	outs := make([]streamOut, streams)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for s := 0; s < streams; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			o := &outs[s]
			<-begin
			added := make([]time.Time, perStream)
			ips := make([][]net.IP, perStream)
			for i, p := range pods[s] {
				r := t.call("ADD", p)
				added[i] = time.Now()
				if r.err != nil {
					o.errs = append(o.errs, r.err)
					continue
				}
				o.add = append(o.add, r.elapsed)
				ips[i] = r.ips
			}
			for i, p := range pods[s] {
				delStart := time.Now()
				r := t.call("DEL", p)
				if r.err != nil {
					o.errs = append(o.errs, r.err)
					continue
				}
				o.del = append(o.del, r.elapsed)
				for _, ip := range ips[i] {
					o.holds = append(o.holds, holding{pod: p.name, ip: ip.String(), from: added[i], to: delStart})
				}
			}
		}(s)
	}
	start := time.Now()
	close(begin)
	wg.Wait()
	wall := time.Since(start)

	var add, del samples
	var holds []holding
	var errs []error
	for _, o := range outs {
		add = append(add, o.add...)
		del = append(del, o.del...)
		holds = append(holds, o.holds...)
		errs = append(errs, o.errs...)
	}
	dups := duplicates(holds)
	for _, d := range dups {
		b.report.problem(fmt.Sprintf("workload 3 %s: duplicate IP: %s", t.kind, d))
	}
	for i, e := range errs {
		if i == 5 {
			b.report.problem(fmt.Sprintf("workload 3 %s: ... %d errors in all", t.kind, len(errs)))
			break
		}
		b.report.problem(fmt.Sprintf("workload 3 %s: %v", t.kind, e))
	}
	return concResult{
		streams: streams, pods: streams * perStream, wall: wall,
		errors: len(errs), duplicates: len(dups),
	}, add, del, nil
}

// workloadReservations is workload 4 (stickyip only): ADD and DEL with 10,000 live
// reservations, against the same ADD on an empty store.
func (b *bench) workloadReservations() error {
	if !b.cfg.has(kindStickyIP) {
		b.report.note("Workload 4 skipped: stickyip not enabled.")
		return nil
	}
	t, err := b.newTarget(kindStickyIP, "bench-resv", "10.248.0.0/16")
	if err != nil {
		return err
	}
	label := fmt.Sprintf("4. %d reservations", b.cfg.reservations)
	// The empty-store baseline is a second stickyip data dir, timed alternately with
	// the full one, so that both see the same load.
	base, err := b.newTarget(kindStickyIP, "bench-resv", "10.248.0.0/16")
	if err != nil {
		return err
	}

	// Seed: pods with a reservation annotation, added then deleted.
	start := time.Now()
	reservedIP := make([]string, b.cfg.reservations)
	var mu sync.Mutex
	var seedErr error
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < b.cfg.seedConcurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := newPod("resv", i)
				p.annotations[reservationAnnotation] = "600" // minutes: outlives the run
				a, d := addDel(t, p)
				if err := firstErr(a.err, d.err); err != nil {
					mu.Lock()
					if seedErr == nil {
						seedErr = err
					}
					mu.Unlock()
					continue
				}
				reservedIP[i] = a.ips[0].String()
			}
		}()
	}
	for i := 0; i < b.cfg.reservations; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if seedErr != nil {
		return fmt.Errorf("seeding reservations: %w", seedErr)
	}
	n, err := countEntries(t, "reserved")
	if err != nil {
		return fmt.Errorf("counting reservations: %w", err)
	}
	if n != b.cfg.reservations {
		return fmt.Errorf("after seeding, stickyip list shows %d reserved entries, want %d", n, b.cfg.reservations)
	}
	b.report.note(fmt.Sprintf("Workload 4: %d reservations made by %d ADD+DEL pairs with %s=600 (%d streams) in %s; `stickyip list` shows %d reserved.",
		b.cfg.reservations, b.cfg.reservations, reservationAnnotation, b.cfg.seedConcurrency, time.Since(start).Round(time.Second), n))
	reserved := make(map[string]bool, len(reservedIP))
	for _, ip := range reservedIP {
		reserved[ip] = true
	}

	var empty, add, del, back samples
	stolen, lost := 0, 0
	for i := 0; i <= b.cfg.nResv; i++ {
		var e, a, d callResult
		if i%2 == 0 {
			e, _ = addDel(base, newPod("base", i))
			a, d = addDel(t, newPod("new", i))
		} else {
			a, d = addDel(t, newPod("new", i))
			e, _ = addDel(base, newPod("base", i))
		}
		if err := firstErr(e.err, a.err, d.err); err != nil {
			return err
		}
		if reserved[a.ips[0].String()] {
			stolen++
		}
		// A returning pod: same namespace/name as a reserved one, new sandbox and UID.
		old := newPod("resv", i)
		p := newPod("back", i)
		p.namespace, p.name = old.namespace, old.name
		p.annotations[reservationAnnotation] = "600"
		ra, rd := addDel(t, p)
		if err := firstErr(ra.err, rd.err); err != nil {
			return err
		}
		if ra.ips[0].String() != reservedIP[i] {
			lost++
		}
		if i == 0 {
			continue
		}
		empty = append(empty, e.elapsed)
		add = append(add, a.elapsed)
		del = append(del, d.elapsed)
		back = append(back, ra.elapsed)
	}
	if stolen > 0 {
		b.report.problem(fmt.Sprintf("workload 4: %d new pods got an IP reserved for another pod", stolen))
	}
	if lost > 0 {
		b.report.problem(fmt.Sprintf("workload 4: %d returning pods did not get their reserved IP back", lost))
	}
	b.report.latencyOne("4. empty store (alternating with the full one)", "ADD", kindStickyIP, empty)
	b.report.latencyOne(label, "ADD (new pod)", kindStickyIP, add)
	b.report.latencyOne(label, "DEL (no annotation)", kindStickyIP, del)
	b.report.latencyOne(label, "ADD (returning pod, reservation hit)", kindStickyIP, back)
	b.report.target(targetResult{
		name:  fmt.Sprintf("%d reservations: ADD median ÷ empty-store ADD median", b.cfg.reservations),
		value: ratio(add.median(), empty.median()),
		limit: "≤ 1.20",
		pass:  ratio(add.median(), empty.median()) <= 1.2 && stolen == 0 && lost == 0,
		have:  true,
	})
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

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
	return nil
}
