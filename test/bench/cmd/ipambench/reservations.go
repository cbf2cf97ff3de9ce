package main

import (
	"fmt"
	"sync"
	"time"
)

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
	// Every seeded pod is of one namespace: without this, the default
	// reservation.maxPerNamespace (32) frees the 33rd pod's address at its DEL.
	t.reservation = map[string]any{"maxPerNamespace": 0}
	base.reservation = t.reservation

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
