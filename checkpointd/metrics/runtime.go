package metrics

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// NewRuntimeCollector returns the collector of the Go runtime's and the
// process's standard metrics, read at each scrape: go_* (goroutines,
// threads, GC pauses and settings, the runtime.MemStats figures as
// go_memstats_*) and process_* (CPU, memory, file descriptors, start
// time), under the names, types and units dashboards know them by.
func NewRuntimeCollector() Collector { return runtimeCollector{} }

type runtimeCollector struct{}

func (runtimeCollector) collect(add func(family)) {
	collectGo(add)
	collectProcess(add)
}

func one(add func(family), name, help, typ string, v float64) {
	add(family{name: name, help: help, typ: typ, samples: []sample{{value: v}}})
}

// memStats are the go_memstats_* families, from runtime.ReadMemStats.
var memStats = []struct {
	name, help, typ string
	get             func(*runtime.MemStats) float64
}{
	{"alloc_bytes", "Bytes of allocated heap objects.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.Alloc) }},
	{"alloc_bytes_total", "Bytes allocated for heap objects since the process started (freed ones included).", typeCounter, func(m *runtime.MemStats) float64 { return float64(m.TotalAlloc) }},
	{"sys_bytes", "Bytes of memory obtained from the OS by the Go runtime.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.Sys) }},
	{"mallocs_total", "Heap objects allocated since the process started.", typeCounter, func(m *runtime.MemStats) float64 { return float64(m.Mallocs) }},
	{"frees_total", "Heap objects freed since the process started.", typeCounter, func(m *runtime.MemStats) float64 { return float64(m.Frees) }},
	{"heap_alloc_bytes", "Bytes of allocated heap objects (as go_memstats_alloc_bytes).", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapAlloc) }},
	{"heap_sys_bytes", "Bytes of heap memory obtained from the OS.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapSys) }},
	{"heap_idle_bytes", "Bytes in heap spans holding no object (returned to the OS or not).", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapIdle) }},
	{"heap_inuse_bytes", "Bytes in heap spans holding at least one object.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapInuse) }},
	{"heap_released_bytes", "Bytes of idle heap spans returned to the OS.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapReleased) }},
	{"heap_objects", "Allocated heap objects.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.HeapObjects) }},
	{"stack_inuse_bytes", "Bytes in goroutine stack spans.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.StackInuse) }},
	{"stack_sys_bytes", "Bytes of stack memory obtained from the OS.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.StackSys) }},
	{"mspan_inuse_bytes", "Bytes of span structures in use.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.MSpanInuse) }},
	{"mspan_sys_bytes", "Bytes obtained from the OS for span structures.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.MSpanSys) }},
	{"mcache_inuse_bytes", "Bytes of per-P cache structures in use.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.MCacheInuse) }},
	{"mcache_sys_bytes", "Bytes obtained from the OS for per-P cache structures.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.MCacheSys) }},
	{"buck_hash_sys_bytes", "Bytes of the profiling bucket hash table.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.BuckHashSys) }},
	{"gc_sys_bytes", "Bytes of garbage collection metadata.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.GCSys) }},
	{"other_sys_bytes", "Bytes of other runtime allocations off the heap.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.OtherSys) }},
	{"next_gc_bytes", "Heap size at which the next garbage collection starts.", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.NextGC) }},
	{"last_gc_time_seconds", "Unix time of the last garbage collection's end (0: none yet).", typeGauge, func(m *runtime.MemStats) float64 { return float64(m.LastGC) / 1e9 }},
}

func collectGo(add func(family)) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, m := range memStats {
		one(add, "go_memstats_"+m.name, m.help, m.typ, m.get(&ms))
	}
	one(add, "go_goroutines", "Goroutines that currently exist.", typeGauge, float64(runtime.NumGoroutine()))
	one(add, "go_sched_gomaxprocs_threads", "The runtime's GOMAXPROCS: OS threads that can run Go code at once.", typeGauge, float64(runtime.GOMAXPROCS(0)))
	add(family{name: "go_info", help: "The Go version the binary was built with.", typ: typeGauge,
		samples: []sample{{labels: []label{{"version", runtime.Version()}}, value: 1}}})

	rs := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	rtmetrics.Read(rs)
	if rs[0].Value.Kind() == rtmetrics.KindUint64 {
		one(add, "go_gc_gogc_percent", "GOGC: heap growth, in percent, that starts a garbage collection (0: off).", typeGauge, float64(rs[0].Value.Uint64()))
	}
	if rs[1].Value.Kind() == rtmetrics.KindUint64 {
		one(add, "go_gc_gomemlimit_bytes", "GOMEMLIMIT: the Go runtime's memory limit (math.MaxInt64: none).", typeGauge, float64(rs[1].Value.Uint64()))
	}

	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}
	debug.ReadGCStats(&gc)
	pauses := make([]sample, 0, 7)
	for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
		pauses = append(pauses, sample{labels: []label{{"quantile", q}}, value: gc.PauseQuantiles[i].Seconds()})
	}
	pauses = append(pauses, sample{suffix: "_sum", value: gc.PauseTotal.Seconds()}, sample{suffix: "_count", value: float64(gc.NumGC)})
	add(family{name: "go_gc_duration_seconds", help: "Stop-the-world pauses of garbage collections, in seconds (quantiles of the recent ones).",
		typ: typeSummary, samples: pauses})
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: 100 on every
// Linux architecture Go supports.
const userHZ = 100

// bootTime is the machine's boot time (Unix seconds, /proc/stat btime),
// read once: a process's start time is counted from it.
var bootTime = sync.OnceValue(func() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			f, _ := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
			return f
		}
	}
	return 0
})

func collectProcess(add func(family)) {
	if st, err := os.ReadFile("/proc/self/stat"); err == nil {
		// The fields after the command, which is in parentheses and may hold any byte.
		if i := bytes.LastIndexByte(st, ')'); i >= 0 {
			f := bytes.Fields(st[i+1:])
			num := func(field int) float64 { // field as numbered in proc(5)
				if field-3 >= len(f) {
					return 0
				}
				v, _ := strconv.ParseFloat(string(f[field-3]), 64)
				return v
			}
			one(add, "process_cpu_seconds_total", "User and system CPU time of the process, in seconds.", typeCounter, (num(14)+num(15))/userHZ)
			one(add, "go_threads", "OS threads of the process.", typeGauge, num(20))
			if bt := bootTime(); bt > 0 {
				one(add, "process_start_time_seconds", "Unix time the process started, in seconds.", typeGauge, bt+num(22)/userHZ)
			}
			one(add, "process_virtual_memory_bytes", "Virtual memory size of the process, in bytes.", typeGauge, num(23))
			one(add, "process_resident_memory_bytes", "Resident memory size of the process, in bytes.", typeGauge, num(24)*float64(os.Getpagesize()))
		}
	}
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, err := d.Readdirnames(-1)
		d.Close()
		if err == nil {
			one(add, "process_open_fds", "Open file descriptors of the process.", typeGauge, float64(len(names)))
		}
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		one(add, "process_max_fds", "The process's limit of open file descriptors.", typeGauge, float64(lim.Cur))
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &lim) == nil {
		one(add, "process_virtual_memory_max_bytes", "The process's limit of virtual memory, in bytes.", typeGauge, float64(lim.Cur))
	}
}
