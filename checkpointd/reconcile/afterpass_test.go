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
	passes := make(chan int, 8)
	n := 0
	h.cfg.AfterPass = func() {
		recs, _, _ := h.store.List()
		passes <- len(recs)
		if n++; n == 3 {
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
	close(passes)
	got := 0
	for saved := range passes {
		got++
		if saved != 1 {
			t.Errorf("AfterPass %d saw %d checkpoints, want the pass's 1", got, saved)
		}
	}
	if got != 3 {
		t.Errorf("AfterPass ran %d times in 3 passes", got)
	}
}
