package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// report collects a run's figures and renders them as Markdown.
type report struct {
	started  time.Time
	plugins  []string
	rows     []*latencyRow
	conc     map[string]concResult
	targets  []targetResult
	notes    []string
	problems []string
	machine  []string
	micro    string
	memory   []memSample
	churn    *churnResult
	// statefulSets is workload 9's.
	statefulSets *stsResult
}

type latencyRow struct {
	workload, op string
	s            map[string]samples
}

type concResult struct {
	streams, pods      int
	wall               time.Duration // of the median round
	errors, duplicates int           // worst round
	allWalls           []time.Duration
}

func (c concResult) podsPerSecond() float64 { return float64(c.pods) / c.wall.Seconds() }

type targetResult struct {
	name  string
	value float64 // the measured ratio
	limit string  // e.g. "≤ 0.02"
	pass  bool
	have  bool // false when a side is missing: no verdict
}

func newReport(plugins []string) *report {
	return &report{started: time.Now().UTC(), plugins: plugins, conc: map[string]concResult{}}
}

func (r *report) row(workload, op string) *latencyRow {
	for _, l := range r.rows {
		if l.workload == workload && l.op == op {
			return l
		}
	}
	l := &latencyRow{workload: workload, op: op, s: map[string]samples{}}
	r.rows = append(r.rows, l)
	return l
}

// latency records samples per plugin for one operation of a workload.
func (r *report) latency(workload, op string, byKind map[string]samples) {
	for k, s := range byKind {
		r.latencyOne(workload, op, k, s)
	}
}

func (r *report) latencyOne(workload, op, kind string, s samples) {
	r.row(workload, op).s[kind] = s
}

func (r *report) concurrency(kind string, c concResult) { r.conc[kind] = c }
func (r *report) note(s string)                         { r.notes = append(r.notes, s) }
func (r *report) problem(s string)                      { r.problems = append(r.problems, s) }
func (r *report) target(t targetResult)                 { r.targets = append(r.targets, t) }

// targetRatio records a target on the ratio of medians stickyip / host-local.
func (r *report) targetRatio(name string, byKind map[string]samples, limit float64) {
	st, hl := byKind[kindStickyIP], byKind[kindHostLocal]
	t := targetResult{name: name + " (stickyip ÷ host-local)", limit: fmt.Sprintf("≤ %.2f", limit)}
	if len(st) > 0 && len(hl) > 0 {
		t.have = true
		t.value = ratio(st.median(), hl.median())
		t.pass = t.value <= limit
	}
	r.target(t)
}

// targetSeconds records a target on stickyip's median in seconds.
func (r *report) targetSeconds(name string, byKind map[string]samples, limit float64) {
	t := targetResult{name: name + " (seconds)", limit: fmt.Sprintf("≤ %.1f", limit)}
	if st := byKind[kindStickyIP]; len(st) > 0 {
		t.have = true
		t.value = st.median().Seconds()
		t.pass = t.value <= limit
	}
	r.target(t)
}

// concurrencyTarget records the 8-way target: stickyip's throughput at least
// host-local's, with no error and no duplicate IP.
func (r *report) concurrencyTarget() {
	st, okS := r.conc[kindStickyIP]
	hl, okH := r.conc[kindHostLocal]
	if !okS && !okH {
		return
	}
	t := targetResult{name: "Concurrent pods/s (stickyip ÷ host-local), 0 duplicates, 0 errors", limit: "≥ 1.00"}
	if okS && okH {
		t.have = true
		t.value = st.podsPerSecond() / hl.podsPerSecond()
		t.pass = t.value >= 1.0 && st.duplicates == 0 && st.errors == 0
	}
	r.target(t)
}

// failed reports whether a target with both sides measured failed.
func (r *report) failed() bool {
	for _, t := range r.targets {
		if t.have && !t.pass {
			return true
		}
	}
	return false
}

func (r *report) render(w io.Writer) {
	fmt.Fprintf(w, "# stickyip vs host-local — %s\n\n", r.started.Format(time.RFC3339))
	fmt.Fprintf(w, "Every figure is one whole plugin process (fork to exit), invoked as a runtime does: "+
		"CNI_* environment, network config with runtimeConfig on stdin. Ratio = stickyip median ÷ host-local median.\n\n")

	fmt.Fprintln(w, "## Latency")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | operation | n | host-local median | p99 | total | stickyip median | p99 | total | ratio |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, l := range r.rows {
		hl, st := l.s[kindHostLocal], l.s[kindStickyIP]
		n := len(st)
		if len(hl) > n {
			n = len(hl)
		}
		rt := "—"
		if len(hl) > 0 && len(st) > 0 {
			rt = fmt.Sprintf("%.3f", ratio(st.median(), hl.median()))
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", l.workload, l.op, n,
			fmtDur(hl.median()), fmtDur(hl.p99()), fmtDur(hl.total()),
			fmtDur(st.median()), fmtDur(st.p99()), fmtDur(st.total()), rt)
	}
	fmt.Fprintln(w)

	if len(r.conc) > 0 {
		fmt.Fprintln(w, "## Concurrency")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Each stream ADDs its pods one after another, then DELs them; the streams run at once. "+
			"A pod is one ADD plus one DEL. The plugins take turns for several rounds; errors and duplicates are the worst round's. Duplicate = two pods holding the same IP between the end of one's ADD and the start of its DEL.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| plugin | streams × pods | wall time (median round) | pods/s | all rounds | errors | duplicate IPs |")
		fmt.Fprintln(w, "|---|---|--:|--:|---|--:|--:|")
		for _, k := range r.plugins {
			c, ok := r.conc[k]
			if !ok {
				continue
			}
			var all []string
			for _, d := range c.allWalls {
				all = append(all, fmtDur(d))
			}
			fmt.Fprintf(w, "| %s | %d × %d | %s | %.1f | %s | %d | %d |\n", k, c.streams, c.pods/c.streams,
				fmtDur(c.wall), c.podsPerSecond(), strings.Join(all, ", "), c.errors, c.duplicates)
		}
		fmt.Fprintln(w)
	}

	if len(r.memory) > 0 {
		fmt.Fprintln(w, "## Memory")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Resident memory (VmRSS, once a second once the node is settled; VmHWM, the peak since start, read last) of each daemon on the 110-pod node of workload 8, and the CPU it used while sampled (user and system time over the samples' span). MB = 10^6 bytes.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| process | binary | samples | VmRSS median | of which heap and stacks (RssAnon) | of which its binary (RssFile) | VmRSS highest | VmHWM (peak) | CPU while sampled |")
		fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
		for _, m := range r.memory {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s in %s (%.1f%%) |\n", m.process, mb(m.binary), len(m.rss), mb(medianOf(m.rss)),
				mb(medianOf(m.anon)), mb(medianOf(m.file)), mb(maxOf(m.rss)), mb(m.hwm),
				m.cpu.Round(time.Millisecond), m.span.Round(100*time.Millisecond), 100*m.cpu.Seconds()/max(m.span.Seconds(), 1e-9))
		}
		fmt.Fprintln(w)
	}

	if c := r.churn; c != nil && len(r.memory) == 2 && len(c.cpu) == 2 {
		fmt.Fprintln(w, "## CPU: idle and pod churn")
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Workload 8, checkpointd at its default settings (`--interval 5s`, placement on, 110 pods checkpointed and sticky). Idle: the settled node, over the memory samples above. Churn: %d pods replaced at once (each old pod's DEL and deletion, a new pod's ADD and Running status), from the first change until checkpointd has saved and published every new pod, %s in all. CPU: the daemon's threads' run time (their schedstat, in nanoseconds); %% of one CPU.\n", c.pods, c.span.Round(100*time.Millisecond))
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| process | idle | during the churn |")
		fmt.Fprintln(w, "|---|--:|--:|")
		for i, m := range r.memory {
			fmt.Fprintf(w, "| %s | %s in %s (%.3f%%) | %s in %s (%.3f%%) |\n", m.process, m.cpu.Round(time.Millisecond), m.span.Round(100*time.Millisecond),
				percent(m.cpu, m.span), c.cpu[i].Round(time.Millisecond), c.span.Round(100*time.Millisecond), percent(c.cpu[i], c.span))
		}
		fmt.Fprintln(w)
		// What the churn itself cost: the CPU above each daemon's idle rate,
		// per pod replaced (docs/bench.md, issue 48: what remains per pod).
		var over []string
		for i, m := range r.memory {
			o := overIdle(m.cpu, m.span, c.cpu[i], c.span)
			over = append(over, fmt.Sprintf("%s %s, %s per pod replaced", m.process, o.Round(time.Millisecond), (o/time.Duration(max(c.pods, 1))).Round(10*time.Microsecond)))
		}
		fmt.Fprintf(w, "Above the idle rate, the churn cost %s.\n", strings.Join(over, "; "))
		fmt.Fprintln(w)
		fmt.Fprintf(w, "From a new pod's Running status to its checkpoint: %s; to its placement entry: %s.\n", durations(c.toSaved), durations(c.toPublished))
		fmt.Fprintln(w)
	}

	if r.statefulSets != nil {
		r.statefulSets.render(w)
	}

	fmt.Fprintln(w, "## Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | limit | result |")
	fmt.Fprintln(w, "|---|--:|--:|---|")
	for _, t := range r.targets {
		v, res := "—", "n/a (a side was not measured)"
		if t.have {
			v = fmt.Sprintf("%.3f", t.value)
			res = "FAIL"
			if t.pass {
				res = "PASS"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.name, v, t.limit, res)
	}
	fmt.Fprintln(w)

	listSection(w, "Problems", r.problems)
	listSection(w, "Notes", r.notes)
	listSection(w, "Machine and versions", r.machine)
	if r.micro != "" {
		fmt.Fprintln(w, "## Engine micro-benchmarks")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "```")
		fmt.Fprintln(w, strings.TrimRight(r.micro, "\n"))
		fmt.Fprintln(w, "```")
	}
}

// mb renders bytes as MB (10^6 bytes).
func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// listSection writes a "## title" section with one bullet per item; nothing
// when there are no items.
func listSection(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "## %s\n\n", title)
	for _, it := range items {
		fmt.Fprintf(w, "- %s\n", it)
	}
	fmt.Fprintln(w)
}
