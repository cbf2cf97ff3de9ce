package main

import (
	"fmt"
	"net"
	"sort"
	"sync"
	"time"
)

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
