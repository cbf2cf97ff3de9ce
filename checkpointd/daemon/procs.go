package daemon

import "runtime"

// oneProcessor runs the daemon's goroutines on one processor (GOMAXPROCS
// 1), unless the environment sets GOMAXPROCS (the operator's choice wins).
// The daemon's work is a pass every interval, a watch and a few requests,
// never two things at once that would each fill a CPU; with a processor
// per core the runtime wakes an idle one to look for work at every
// wakeup (a timer, a watch event, a reply) and puts it back to sleep:
// workload 8's CPU, idle and during a churn of 20 pods, fell by 15-25 %
// with GOMAXPROCS=1 on this project's 2-core machine (test/bench/README.md).
func oneProcessor(getenv func(string) string) {
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
