//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// stepTB is what a step of a scenario that shares one cluster runs with: its
// own subtest's testing.T for failures and logs, while cleanups (and
// temporary directories) belong to the whole test, so what a step starts
// (a restarted checkpointd, a node's new mount namespace after a power cut)
// lives as long as the cluster.
type stepTB struct {
	*testing.T
	whole testing.TB
	// failed keeps the step's first failure for the summary, which CI
	// prints even when it cuts the step's own output.
	failed *string
}

// note keeps msg as the step's failure if it is the first.
func (s stepTB) note(msg string) {
	if *s.failed == "" {
		*s.failed = msg
	}
}

// Error logs args and marks the step failed.
func (s stepTB) Error(args ...any) {
	s.T.Helper()
	s.note(fmt.Sprint(args...))
	s.T.Error(args...)
}

// Errorf logs a formatted message and marks the step failed.
func (s stepTB) Errorf(format string, args ...any) {
	s.T.Helper()
	s.note(fmt.Sprintf(format, args...))
	s.T.Errorf(format, args...)
}

// Fatal logs args and ends the step.
func (s stepTB) Fatal(args ...any) {
	s.T.Helper()
	s.note(fmt.Sprint(args...))
	s.T.Fatal(args...)
}

// Fatalf logs a formatted message and ends the step.
func (s stepTB) Fatalf(format string, args ...any) {
	s.T.Helper()
	s.note(fmt.Sprintf(format, args...))
	s.T.Fatalf(format, args...)
}

// Cleanup registers f with the whole test.
func (s stepTB) Cleanup(f func()) { s.whole.Cleanup(f) }

// TempDir is a directory of the whole test.
func (s stepTB) TempDir() string { return s.whole.TempDir() }

// stepState is how a step ended.
type stepState int

const (
	stepNotRun  stepState = iota // filtered out by -run, or not reached
	stepPassed                   // ran and passed
	stepFailed                   // ran and failed
	stepSkipped                  // skipped (a step it needs did not pass)
)

func (s stepState) String() string {
	return [...]string{"not run", "passed", "FAILED", "skipped"}[s]
}

// steps runs the steps of a scenario on one cluster, each as a subtest of
// the whole test, in order, and remembers how each ended.
type steps struct {
	t     *testing.T // the whole test
	c     *cluster
	start time.Time
	// booted is how long the cluster took to boot.
	booted time.Duration
	ended  map[string]stepState
	order  []string
	took   map[string]time.Duration
	// failure is each failed step's first failure message.
	failure map[string]string
}

// newSteps prepares the steps of the whole test t on cluster c; start is
// when the test began (the figures count from there).
func newSteps(t *testing.T, c *cluster, start time.Time) *steps {
	return &steps{t: t, c: c, start: start, ended: map[string]stepState{}, took: map[string]time.Duration{}, failure: map[string]string{}}
}

// run runs step name as a subtest. needs are the steps it needs to have
// passed; a need ending in "?" is one that must have passed if it ran at
// all (a step left out with -run leaves the cluster as it was). When one
// did not, the step is skipped, naming it. While the step runs, the
// cluster, its control plane and its nodes report to the step's subtest.
func (s *steps) run(name string, needs []string, fn func()) {
	s.t.Helper()
	s.order = append(s.order, name)
	state := stepNotRun
	start := time.Now()
	var failed string
	s.t.Run(name, func(t *testing.T) {
		defer func() {
			switch {
			case t.Failed():
				state = stepFailed
			case t.Skipped():
				state = stepSkipped
			default:
				state = stepPassed
			}
		}()
		for _, need := range needs {
			optional := strings.HasSuffix(need, "?")
			need = strings.TrimSuffix(need, "?")
			switch got := s.ended[need]; {
			case got == stepPassed, optional && got == stepNotRun:
			case got == stepNotRun:
				t.Skipf("needs step %q, which did not run (include it in -run)", need)
			default:
				t.Skipf("needs step %q, which %s: the cluster is not in the state this step starts from", need, got)
			}
		}
		s.c.reportTo(stepTB{T: t, whole: s.t, failed: &failed})
		defer s.c.reportTo(s.t)
		fn()
	})
	s.ended[name] = state
	if state == stepFailed {
		s.failure[name] = failed
	}
	if state != stepNotRun {
		s.took[name] = time.Since(start)
	}
}

// passed reports whether step name ran and passed.
func (s *steps) passed(name string) bool { return s.ended[name] == stepPassed }

// summary logs each step's outcome and duration and the whole test's, and
// under a failed step its first failure (cut to 600 characters).
func (s *steps) summary() {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-8s %s\n", "cluster boot", "", s.booted.Round(100*time.Millisecond))
	for _, name := range s.order {
		took := "-"
		if d, ok := s.took[name]; ok {
			took = d.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "%-22s %-8s %s\n", name, s.ended[name], took)
		if msg := s.failure[name]; msg != "" {
			if len(msg) > 600 {
				msg = msg[:600] + "…"
			}
			fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(msg, "\n", "\n    "))
		}
	}
	fmt.Fprintf(&b, "%-22s %-8s %s", "whole test", "", time.Since(s.start).Round(time.Second))
	s.t.Logf("steps:\n%s", b.String())
}

// reportTo makes the cluster, its control plane and its nodes report
// failures and logs to t.
func (c *cluster) reportTo(t testing.TB) {
	c.t = t
	for _, n := range c.nodes {
		n.t = t
	}
}
