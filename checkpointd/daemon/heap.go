package daemon

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// releaseEvery bounds the time between two releases while a pass runs
// longer than that.
const releaseEvery = 5 * time.Second

// releaseAfter is how much the heap must have allocated since the last
// release for the next one to be worth its collection.
const releaseAfter = 1 << 20

// memoryReleaser hands the memory a reconcile pass freed back to the kernel:
// a collection, then the freed heap returned (runtime/debug.FreeOSMemory).
// Most of what a pass allocates (the runtime's and the store's listings,
// the API objects read) is garbage once it ends; left to the collector's
// pacing (GOGC) that garbage, up to once more the live heap, stays resident
// between passes, and the runtime keeps freed pages a while longer. So it
// releases after a pass, and every releaseEvery during a pass that runs
// longer (the first on a node full of opted-in pods saves every one at the
// API client's pace, 40 s for 110 pods, and held its garbage until it
// ended, 3 MB above the steady state: test/bench/README.md) — once the heap
// has allocated releaseAfter since the last release. An idle pass at 110
// pods allocates less than that: a collection after every one was a third
// of checkpointd's CPU (perf record of workload 8).
type memoryReleaser struct {
	mu        sync.Mutex
	passEnded bool   // since the last tick of run
	released  uint64 // the heap's allocations at the last release
	sample    [1]metrics.Sample
}

func newMemoryReleaser() *memoryReleaser {
	m := &memoryReleaser{}
	m.sample[0].Name = "/gc/heap/allocs:bytes"
	return m
}

// afterPass releases (the reconciler's AfterPass).
func (m *memoryReleaser) afterPass() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.release()
	m.passEnded = true
}

// release releases if the heap allocated releaseAfter since the last time.
func (m *memoryReleaser) release() bool {
	metrics.Read(m.sample[:])
	allocs := m.sample[0].Value.Uint64()
	if allocs-m.released < releaseAfter {
		return false
	}
	debug.FreeOSMemory()
	m.released = allocs
	return true
}

// run releases every releaseEvery in which no pass ended, until ctx is
// done.
func (m *memoryReleaser) run(ctx context.Context) {
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.mu.Lock()
			if !m.passEnded {
				m.release()
			}
			m.passEnded = false
			m.mu.Unlock()
		}
	}
}
