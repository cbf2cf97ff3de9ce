package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(n ...int) samples {
		var s samples
		for _, v := range n {
			s = append(s, time.Duration(v)*time.Millisecond)
		}
		return s
	}
	hundred := samples{}
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		name string
		s    samples
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", ms(7), 99, 7 * time.Millisecond},
		{"median odd", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"median even takes lower", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is 99th", hundred, 99, 99 * time.Millisecond},
		{"p100 is max", hundred, 100, 100 * time.Millisecond},
		{"p99 of 3 is max", ms(1, 9, 2), 99, 9 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.percentile(tt.p); got != tt.want {
				t.Errorf("percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestDuplicates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name string
		hs   []holding
		want int
	}{
		{"distinct IPs", []holding{
			{"a", "10.0.0.2", at(0), at(10)},
			{"b", "10.0.0.3", at(0), at(10)},
		}, 0},
		{"same IP at once", []holding{
			{"a", "10.0.0.2", at(0), at(10)},
			{"b", "10.0.0.2", at(5), at(15)},
		}, 1},
		{"reuse after DEL started", []holding{
			{"a", "10.0.0.2", at(0), at(10)},
			{"b", "10.0.0.2", at(10), at(15)},
		}, 0},
		{"one long holder, two short ones", []holding{
			{"b", "10.0.0.2", at(2), at(3)},
			{"a", "10.0.0.2", at(0), at(10)},
			{"c", "10.0.0.2", at(4), at(5)},
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := duplicates(tt.hs); len(got) != tt.want {
				t.Errorf("duplicates() = %q, want %d", got, tt.want)
			}
		})
	}
}

// The daemons' CPU is read in nanoseconds from their threads' schedstat,
// and in clock ticks from the process's stat (a command name may hold
// spaces and parentheses).
func TestCPUParsers(t *testing.T) {
	ticks, err := statTicks([]byte("4242 (flan (x) d) S 1 4242 4242 0 -1 4194560 1516 0 0 0 7 5 0 0 20 0 9 0 1234 1340000000 7000 18446744073709551615"))
	if err != nil || ticks != 12 {
		t.Errorf("statTicks = %d, %v; want 7 + 5", ticks, err)
	}
	if _, err := statTicks([]byte("4242 (x) S 1")); err == nil {
		t.Error("statTicks of a short line: no error")
	}
	run, err := schedstatRun([]byte("167711053 28854413 476\n"))
	if err != nil || run != 167711053*time.Nanosecond {
		t.Errorf("schedstatRun = %v, %v", run, err)
	}
	if _, err := schedstatRun([]byte("167711053\n")); err == nil {
		t.Error("schedstatRun of one field: no error")
	}
}

// TestOverIdle: the churn's CPU above the idle rate over the churn's own
// span (the spans differ: the churn lasts until every pod is saved).
func TestOverIdle(t *testing.T) {
	for _, c := range []struct {
		idle, idleSpan, churn, churnSpan, want time.Duration
	}{
		{50 * time.Millisecond, time.Minute, 104 * time.Millisecond, time.Minute, 54 * time.Millisecond},
		{50 * time.Millisecond, time.Minute, 104 * time.Millisecond, 2 * time.Minute, 4 * time.Millisecond},
		{50 * time.Millisecond, time.Minute, 40 * time.Millisecond, time.Minute, 0}, // quieter than idle: nothing above it
		{50 * time.Millisecond, 0, 40 * time.Millisecond, time.Minute, 40 * time.Millisecond},
	} {
		if got := overIdle(c.idle, c.idleSpan, c.churn, c.churnSpan); got != c.want {
			t.Errorf("overIdle(%s in %s, %s in %s) = %s, want %s", c.idle, c.idleSpan, c.churn, c.churnSpan, got, c.want)
		}
	}
}
