package daemon

import (
	"context"
	"runtime/debug"
	"time"
)

// releaseMemoryEvery runs, every d (the reconcile interval) until ctx is
// done, a collection and hands the heap it freed back to the kernel
// (runtime/debug.FreeOSMemory). Most of what checkpointd allocates is
// garbage within a pass: checkpoint records read and decoded again, the
// runtime's and the store's listings, the placement publisher's pass. Left
// to the collector's pacing (GOGC) that garbage, up to once more the live
// heap, stays resident, and the runtime keeps freed pages a while longer;
// a node's first pass, which saves every pod (110 on a full node, paced by
// the API client's rate limit), lasts tens of seconds. On a 110-pod node
// this holds checkpointd's resident memory about 5 MB lower, for one
// collection per interval (docs/bench.md, Lean: its CPU is measured there).
func releaseMemoryEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			debug.FreeOSMemory()
		}
	}
}
