package reconcile

import (
	"context"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/cri"
)

// Run calls AfterPass once each pass has done its work (the daemon frees the
// pass's memory there), and keeps running passes.
func TestRunCallsAfterPassAfterEachPass(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-web", "nginx", true)
	h.api.put(p)
	h.rt.set([]cri.Sandbox{sandbox("sb-web", p, true)}...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Run's goroutine alone calls AfterPass; the slice is read once Run
	// has returned. A pass may still start after the cancel (the ticker
	// and ctx ready together): at least 3.
	var saved []int
	h.cfg.AfterPass = func() {
		recs, _, _ := h.store.List()
		if saved = append(saved, len(recs)); len(saved) == 3 {
			cancel()
		}
	}
	h.r = New(h.cfg)
	done := make(chan struct{})
	go func() { h.r.Run(ctx, time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not reach 3 passes")
	}
	if len(saved) < 3 {
		t.Errorf("AfterPass ran %d times in 3 passes", len(saved))
	}
	for i, n := range saved {
		if n != 1 {
			t.Errorf("AfterPass %d saw %d checkpoints, want the pass's 1", i+1, n)
		}
	}
}
