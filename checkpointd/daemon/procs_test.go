package daemon

import (
	"runtime"
	"testing"
)

// TestOneProcessor: the daemon runs on one processor, unless the
// environment says otherwise (test/bench/README.md: the runtime's
// wakeups of idle processors were a fifth of its CPU at 110 pods).
func TestOneProcessor(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(was)
	runtime.GOMAXPROCS(4)
	oneProcessor(func(string) string { return "" })
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS unset: %d processors, want 1", got)
	}
	runtime.GOMAXPROCS(4)
	oneProcessor(func(k string) string { return map[string]string{"GOMAXPROCS": "3"}[k] })
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Errorf("GOMAXPROCS=3 in the environment: %d processors, want the runtime's own (4)", got)
	}
}
