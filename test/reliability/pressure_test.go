//go:build reliability

package reliability

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestPoolPressure runs 16 plugin processes at once on a pool smaller than
// the number of pods that want a reserved address, so reservations must be
// given up (default poolFull: evict) and ADDs fail with code 100 when every
// address is held by a live sandbox. Whatever the interleaving: a live
// allocation is never taken, no address is held twice, and the store passes
// `stickyip check`.
func TestPoolPressure(t *testing.T) {
	p := newPlugin(t)
	workers := envInt(t, "RELIABILITY_WORKERS", 16)
	opsPerWorker := envInt(t, "RELIABILITY_PRESSURE_OPS_PER_WORKER", 60)
	rng := newRand(t)
	netns := newNetnsPool(t, 4)

	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	const network = "pressnet"
	// 10.250.2.0/27: 29 usable addresses (.1 is the gateway, .31 broadcast is not handed out).
	conf := netConf(network, dataDir, filepath.Join(base, "plugin.log"), []string{"10.250.2.0/27"})
	const perWorker = 3 // 48 pods wanting a reserved address, at most 48 live
	type held struct{ container, netns string }

	var (
		mu      sync.Mutex
		records []*opRecord
	)
	pods := make([][]*pod, workers)
	for w := range pods {
		for j := 0; j < perWorker; j++ {
			pods[w] = append(pods[w], &pod{Namespace: "pressure", Name: fmt.Sprintf("w%02d-%d", w, j), IfName: "eth0",
				Class: "private", UIDs: []string{fmt.Sprintf("uid-w%02d-%d", w, j)}, Sticky: true})
		}
	}
	holding := make([]map[*pod]held, workers)
	seeds := make([]uint64, workers)
	for w := range seeds {
		seeds[w] = rng.Uint64()
		holding[w] = map[*pod]held{}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := newWorkerRand(seeds[w])
			for i := 0; i < opsPerWorker; i++ {
				pd := pods[w][r.IntN(perWorker)]
				h, isHeld := holding[w][pd]
				rec := &opRecord{Worker: w, Pod: pd, UID: pd.UIDs[0], Start: time.Now()}
				if isHeld {
					rec.Command, rec.Container = "DEL", h.container
				} else {
					h = held{fmt.Sprintf("w%02d-%03d-%08x", w, i, r.Uint32()), netns.Path(r.IntN(4))}
					rec.Command, rec.Container = "ADD", h.container
				}
				rec.Out = p.CNI(cniCall{Command: rec.Command, ContainerID: rec.Container, Netns: h.netns, IfName: "eth0",
					Args:  podArgs(pd.Namespace, pd.Name, rec.UID, rec.Container),
					Stdin: encodeConf(t, withAnnotations(conf, pd.annotations()))})
				rec.End = time.Now()
				if rec.Out.Result != nil {
					rec.Addrs = rec.Out.Result.Addrs()
				}
				switch {
				case rec.Command == "DEL":
					delete(holding[w], pd)
				case rec.Out.OK():
					holding[w][pd] = h
				}
				mu.Lock()
				records = append(records, rec)
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)

	f := &figures{}
	f.add("unexpected failures (must be 0)", 0)
	last := map[*pod][]string{}
	for _, r := range sortedByEnd(records) {
		f.add("operations", 1)
		f.add(fmt.Sprintf("result %s %s", r.Command, r.Out.Kind()), 1)
		if r.Out.OK() {
			if r.Command == "ADD" {
				if prev, ok := last[r.Pod]; ok && !slices.Equal(prev, r.Addrs) {
					f.add("ADDs that got a new address (reservation given up)", 1)
				}
				last[r.Pod] = r.Addrs
			}
			continue
		}
		if r.Command == "ADD" && r.Out.Err != nil && r.Out.Err.Code == 100 {
			continue
		}
		f.add("unexpected failures (must be 0)", 1)
		t.Errorf("unexpected failure: %s %s %s: %s", r.Command, r.Pod.Identity(), r.Container, r.Out.Describe())
	}
	dups := overlappingHolders(records, start.Add(24*time.Hour), func(*pod) bool { return false })
	for i, d := range dups {
		if i < 10 {
			t.Errorf("duplicate: %s", d)
		}
	}
	f.add("duplicate holders over time (must be 0)", len(dups))

	p.RequireCheckOK(t, dataDir, "after the pool-pressure run")
	entries := p.List(t, dataDir)
	if d := duplicateIPs(entries); len(d) > 0 {
		t.Errorf("IPs held twice in list: %v", d)
	}
	byContainer := map[string][]entry{}
	for _, e := range entries {
		if e.State == "allocated" {
			byContainer[e.ContainerID] = append(byContainer[e.ContainerID], e)
		}
	}
	taken := 0
	for w := range holding {
		for pd, h := range holding[w] {
			want := lastAddAddrs(records, h.container)
			if !entriesAre(byContainer[h.container], "allocated", h.container, want) {
				taken++
				t.Errorf("live sandbox %s of %s should hold %v; list shows %v", h.container, pd.Identity(), want, byContainer[h.container])
			}
		}
	}
	f.add("live allocations taken away (must be 0)", taken)
	states := map[string]int{}
	for _, e := range entries {
		states[e.State]++
	}
	report(t, "pool pressure", f,
		fmt.Sprintf("workers %d, 48 pods with reservations on 29 addresses, wall %v", workers, elapsed.Round(time.Millisecond)),
		fmt.Sprintf("store at the end: %d allocated, %d reserved", states["allocated"], states["reserved"]))
}
