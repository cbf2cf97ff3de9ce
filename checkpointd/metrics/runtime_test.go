package metrics

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Go and process figures are this process's: a dashboard that shows
// them shows the daemon's memory, CPU, threads and age.
func TestRuntimeFigures(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewRuntimeCollector())
	fams := parse(t, page(t, r))
	val := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %v, want one sample", name, f)
		}
		m := f.GetMetric()[0]
		return m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	kB := func(key string) float64 {
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == key+":" {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v * 1024
			}
		}
		t.Fatalf("no %s in /proc/self/status", key)
		return 0
	}
	// Both are read a moment apart: the same within a factor that no
	// misread field of /proc/self/stat would meet.
	near := func(name string, got, want float64) {
		if got < want/2 || got > want*2 {
			t.Errorf("%s = %v, /proc/self/status says %v", name, got, want)
		}
	}
	near("process_resident_memory_bytes", val("process_resident_memory_bytes"), kB("VmRSS"))
	near("process_virtual_memory_bytes", val("process_virtual_memory_bytes"), kB("VmSize"))
	near("go_threads", val("go_threads"), kB("Threads")/1024)
	if start := time.Unix(int64(val("process_start_time_seconds")), 0); time.Since(start) < -time.Minute || time.Since(start) > time.Hour {
		t.Errorf("process_start_time_seconds says the test started at %v", start)
	}
	if val("process_open_fds") < 3 || val("process_max_fds") < val("process_open_fds") || val("process_cpu_seconds_total") < 0 {
		t.Errorf("fds %v of max %v, CPU %v s", val("process_open_fds"), val("process_max_fds"), val("process_cpu_seconds_total"))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	near("go_memstats_sys_bytes", val("go_memstats_sys_bytes"), float64(ms.Sys))
	if val("go_goroutines") < 1 || val("go_memstats_heap_inuse_bytes") <= 0 || val("go_memstats_next_gc_bytes") <= 0 {
		t.Errorf("goroutines %v, heap in use %v, next GC %v", val("go_goroutines"), val("go_memstats_heap_inuse_bytes"), val("go_memstats_next_gc_bytes"))
	}
	if v := fams["go_info"].GetMetric()[0].GetLabel()[0].GetValue(); v != runtime.Version() {
		t.Errorf("go_info version %q, want %q", v, runtime.Version())
	}
	gc := fams["go_gc_duration_seconds"].GetMetric()
	if len(gc) != 1 || len(gc[0].GetSummary().GetQuantile()) != 5 {
		t.Errorf("go_gc_duration_seconds: %v, want a summary of 5 quantiles", gc)
	}
}
