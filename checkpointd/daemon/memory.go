package daemon

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// releaseEvery bounds the time between two releases while a pass runs
// longer than that.
const releaseEvery = 5 * time.Second

// memoryReleaser hands the memory a reconcile pass freed back to the kernel:
// a collection, then the freed heap returned (runtime/debug.FreeOSMemory).
// Most of what a pass allocates (checkpoint records read and decoded, the
// runtime's and the store's listings) is garbage once it ends; left to the
// collector's pacing (GOGC) that garbage, up to once more the live heap,
// stays resident between passes, and the runtime keeps freed pages a while
// longer. So it releases after each pass, and every releaseEvery during a
// pass that runs longer: the first on a node full of opted-in pods saves
// every one at the API client's pace (40 s for 110 pods), and held its
// garbage until it ended, 3 MB above the steady state (docs/bench.md,
// Lean, measures both).
type memoryReleaser struct {
	passEnded atomic.Bool // since the last tick of run
}

// afterPass releases (the reconciler's AfterPass).
func (m *memoryReleaser) afterPass() {
	debug.FreeOSMemory()
	m.passEnded.Store(true)
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
			if !m.passEnded.Swap(false) {
				debug.FreeOSMemory()
			}
		}
	}
}
