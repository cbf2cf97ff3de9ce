//go:build reliability

package reliability

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// killAfter starts the call, sends SIGKILL after delay and waits. killed
// reports whether the signal hit a running process (rather than one that had
// already finished).
func killAfter(p *plugin, c cniCall, delay time.Duration) (o *outcome, killed bool) {
	o, killed = killProcessAfter(func(ctx context.Context) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		return p.Command(ctx, c)
	}, delay)
	if !killed && o.StartErr == nil {
		o.ParseCNI(c.Command)
	}
	return o, killed
}

// killProcessAfter starts the prepared process, sends SIGKILL after delay
// and waits. The process is always started before the delay begins, so a
// delay near zero still kills a running process rather than none.
func killProcessAfter(prepare func(context.Context) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer), delay time.Duration) (o *outcome, killed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd, stdout, stderr := prepare(ctx)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return &outcome{StartErr: err, ExitCode: -1}, false
	}
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err := cmd.Wait()
	o = harness.Collect(cmd, err, stdout, stderr, time.Since(start), ctx)
	return o, o.Signal == syscall.SIGKILL
}

// crashPod is the model of one pod identity in the crash suite.
type crashPod struct {
	name      string
	sticky    bool
	container string   // sandbox holding the identity, "" when none
	netns     string   // its netns
	addrs     []string // addresses it holds or has reserved; nil when none
	seq       int
}

func (c *crashPod) args(container string) string {
	return podArgs("crash", c.name, "uid-"+c.name, container)
}

// TestCrash kills plugin processes with SIGKILL at random moments during
// ADD, DEL and GC. After every kill the store must open, `stickyip check`
// must pass, and after the runtime's follow-up (a retried ADD, a DEL, or
// another GC) the store must hold exactly what the model says: nothing
// leaked, nothing lost.
func TestCrash(t *testing.T) {
	p := newPlugin(t)
	rng := newRand(t)
	targetKills := envInt(t, "RELIABILITY_KILLS", 400)
	budget := time.Duration(envInt(t, "RELIABILITY_CRASH_SECONDS", 150)) * time.Second
	netns := newNetnsPool(t, 4)
	f := &figures{}

	base := t.TempDir()
	logFile := filepath.Join(base, "plugin.log")

	// Phase 1: kills while the very first ADD creates the database.
	t.Run("first ADD", func(t *testing.T) {
		const rounds = 30
		for i := 0; i < rounds; i++ {
			dataDir := filepath.Join(base, fmt.Sprintf("create-%02d", i))
			conf := netConf("crashnet", dataDir, logFile)
			c := cniCall{Command: "ADD", ContainerID: "first", Netns: netns.Path(0), IfName: "eth0",
				Args: podArgs("crash", "first", "uid-first", "first"), Stdin: encodeConf(t, conf)}
			_, killed := killAfter(p, c, time.Duration(rng.IntN(8000))*time.Microsecond)
			if killed {
				f.add("kills during database creation", 1)
			}
			if o := p.Check(dataDir); o.ExitCode != 0 || o.Panicked() {
				f.add("inconsistencies (must be 0)", 1)
				t.Errorf("round %d: after a kill during creation, check fails: %s", i, o.Describe())
			}
			o := p.CNI(c)
			if !o.OK() {
				f.add("inconsistencies (must be 0)", 1)
				t.Errorf("round %d: retried ADD after a kill during creation: %s", i, o.Describe())
				continue
			}
			if es := p.Held(t, dataDir); len(es) != 1 || es[0].ContainerID != "first" {
				f.add("inconsistencies (must be 0)", 1)
				t.Errorf("round %d: after the retried ADD the store lists %v", i, es)
			}
			if _, err := os.Stat(filepath.Join(dataDir, dbName+".new")); err == nil {
				t.Logf("round %d: %s.new left behind by the killed creation (harmless if the next creation removes it)", i, dbName)
			}
		}
	})

	// Phase 2: kills during ADD, DEL, GC and the operator's gc on a busy store.
	dataDir := filepath.Join(base, "data")
	conf := netConf("crashnet", dataDir, logFile, []string{"10.250.1.0/24"}, []string{"fd00:251::/120"})
	var pods []*crashPod
	for i := 0; i < 16; i++ {
		pods = append(pods, &crashPod{name: fmt.Sprintf("p%02d", i), sticky: i%4 == 0})
	}
	annotations := func(c *crashPod) map[string]string {
		if c.sticky {
			return map[string]string{annoDuration: "30"}
		}
		return map[string]string{}
	}
	addCall := func(c *crashPod, container, ns string) cniCall {
		return cniCall{Command: "ADD", ContainerID: container, Netns: ns, IfName: "eth0", Args: c.args(container),
			Stdin: encodeConf(t, withAnnotations(conf, annotations(c)))}
	}
	delCall := func(c *crashPod, container, ns string) cniCall {
		return cniCall{Command: "DEL", ContainerID: container, Netns: ns, IfName: "eth0", Args: c.args(container),
			Stdin: encodeConf(t, withAnnotations(conf, annotations(c)))}
	}
	gcCall := func(keep []*crashPod) cniCall {
		var att [][2]string
		for _, c := range keep {
			att = append(att, [2]string{c.container, "eth0"})
		}
		return cniCall{Command: "GC", Stdin: encodeConf(t, withValidAttachments(conf, att))}
	}
	inconsistent := func(format string, a ...any) {
		f.add("inconsistencies (must be 0)", 1)
		if f.get("inconsistencies (must be 0)") <= 15 {
			t.Errorf(format, a...)
		}
	}
	// succeeded applies a finished ADD to the model.
	addDone := func(c *crashPod, container, ns string, o *outcome) {
		got := o.Result.Addrs()
		if c.addrs != nil && c.sticky && !slices.Equal(got, c.addrs) {
			inconsistent("sticky pod %s got %v after a crash, had %v", c.name, got, c.addrs)
		}
		c.container, c.netns, c.addrs = container, ns, got
	}
	delDone := func(c *crashPod) {
		c.container, c.netns = "", ""
		if !c.sticky {
			c.addrs = nil
		}
	}

	// Background load: other pods' ADD/DEL keep the lock busy, so kills also
	// land while the victim waits for the lock or holds it with others queued.
	stopBG := make(chan struct{})
	var bgWG sync.WaitGroup
	var stopOnce sync.Once
	stopBackground := func() {
		stopOnce.Do(func() { close(stopBG) })
		bgWG.Wait()
	}
	t.Cleanup(stopBackground) // also when a check below ends the test early
	bgFailures := 0
	var bgMu sync.Mutex
	for b := 0; b < 2; b++ {
		bgWG.Add(1)
		go func(b int) {
			defer bgWG.Done()
			name := fmt.Sprintf("bg%d", b)
			ns := netns.Path(b)
			bgConf := encodeConf(t, withAnnotations(conf, map[string]string{}))
			for i := 0; ; i++ {
				select {
				case <-stopBG:
					return
				default:
				}
				container := fmt.Sprintf("%s-%05d", name, i)
				for _, cmd := range []string{"ADD", "DEL"} {
					o := p.CNI(cniCall{Command: cmd, ContainerID: container, Netns: ns, IfName: "eth0",
						Args: podArgs("background", name, "uid-"+name, container), Stdin: bgConf})
					bgMu.Lock()
					f.add("background calls", 1)
					if !o.OK() {
						bgFailures++
						t.Errorf("background %s %s: %s", cmd, container, o.Describe())
					}
					bgMu.Unlock()
				}
			}
		}(b)
	}

	// Calibrate the kill window on uninterrupted calls (under the background load).
	var durations []time.Duration
	for i := 0; i < 20; i++ {
		c := pods[1+i%3]
		if c.container == "" {
			container := fmt.Sprintf("%s-cal%d", c.name, i)
			o := p.CNI(addCall(c, container, netns.Path(i)))
			if !o.OK() {
				t.Fatalf("calibration ADD: %s", o.Describe())
			}
			addDone(c, container, netns.Path(i), o)
			durations = append(durations, o.Elapsed)
		} else {
			o := p.CNI(delCall(c, c.container, c.netns))
			if !o.OK() {
				t.Fatalf("calibration DEL: %s", o.Describe())
			}
			delDone(c)
			durations = append(durations, o.Elapsed)
		}
	}
	// Kill delays are uniform over [0, p75 of a call]: most land while the
	// process runs (start-up, lock, transaction, fsync), some after it ended.
	window := percentile(durations, 75)
	t.Logf("calls take p50 %v p75 %v p90 %v; kills land uniformly in [0, %v]",
		percentile(durations, 50), percentile(durations, 75), percentile(durations, 90), window)
	f.add("inconsistencies (must be 0)", 0)
	f.add("check failures after a kill (must be 0)", 0)

	start := time.Now()
	iterations := 0
	for f.get("kills landed mid-call") < targetKills && time.Since(start) < budget {
		iterations++
		delay := time.Duration(rng.Int64N(int64(window)))
		var held, free []*crashPod
		for _, c := range pods {
			if c.container != "" {
				held = append(held, c)
			} else {
				free = append(free, c)
			}
		}
		x := rng.IntN(100)
		switch {
		case x < 40 && len(free) > 0: // ADD
			c := free[rng.IntN(len(free))]
			c.seq++
			container := fmt.Sprintf("%s-%05d", c.name, c.seq)
			ns := netns.Path(rng.IntN(4))
			o, killed := killAfter(p, addCall(c, container, ns), delay)
			afterKill(t, p, dataDir, "ADD", killed, o, f, inconsistent)
			if !killed {
				if o.OK() {
					addDone(c, container, ns, o)
				} else {
					inconsistent("ADD %s finished with %s", container, o.Describe())
				}
				break
			}
			if rng.IntN(2) == 0 { // the runtime retries the ADD
				o := p.CNI(addCall(c, container, ns))
				if !o.OK() {
					inconsistent("retried ADD %s after a kill: %s", container, o.Describe())
					break
				}
				addDone(c, container, ns, o)
			} else { // the runtime gives up the sandbox
				if o := p.CNI(delCall(c, container, ns)); !o.OK() {
					inconsistent("DEL %s after a killed ADD: %s", container, o.Describe())
				}
				if c.sticky && c.addrs == nil {
					// First ADD of a sticky pod: it may or may not have committed.
					c.addrs = reservedAddrs(p.Held(t, dataDir), c.name)
				}
				delDone(c)
			}
		case x < 80 && len(held) > 0: // DEL
			c := held[rng.IntN(len(held))]
			o, killed := killAfter(p, delCall(c, c.container, c.netns), delay)
			afterKill(t, p, dataDir, "DEL", killed, o, f, inconsistent)
			if !killed && !o.OK() {
				inconsistent("DEL %s finished with %s", c.container, o.Describe())
			}
			if killed {
				if o := p.CNI(delCall(c, c.container, c.netns)); !o.OK() {
					inconsistent("retried DEL %s after a kill: %s", c.container, o.Describe())
				}
			}
			delDone(c)
		case x < 95: // CNI GC dropping one sandbox the runtime no longer knows
			keep := slices.Clone(held)
			var dropped *crashPod
			if len(keep) > 0 {
				i := rng.IntN(len(keep))
				dropped = keep[i]
				keep = slices.Delete(keep, i, i+1)
			}
			o, killed := killAfter(p, gcCall(keep), delay)
			afterKill(t, p, dataDir, "GC", killed, o, f, inconsistent)
			if !killed && !o.OK() {
				inconsistent("GC finished with %s", o.Describe())
			}
			if killed {
				if o := p.CNI(gcCall(keep)); !o.OK() {
					inconsistent("retried GC after a kill: %s", o.Describe())
				}
			}
			if dropped != nil {
				delDone(dropped)
			}
		default: // the operator's gc (nothing is expired, every sandbox is alive)
			o, killed := killProcessAfter(func(ctx context.Context) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
				return p.ToolCommand(ctx, "--data-dir", dataDir, "gc")
			}, delay)
			afterKill(t, p, dataDir, "operator gc", killed, o, f, inconsistent)
			if !killed && o.ExitCode != 0 {
				inconsistent("operator gc finished with %s", o.Describe())
			}
		}
		compareModel(t, p.Held(t, dataDir), pods, inconsistent)
	}
	elapsed := time.Since(start)
	stopBackground()
	f.add("background call failures (must be 0)", bgFailures)

	// Finally the runtime deletes everything and the operator releases the
	// reservations: nothing may remain.
	for _, c := range pods {
		if c.container != "" {
			if o := p.CNI(delCall(c, c.container, c.netns)); !o.OK() {
				inconsistent("final DEL %s: %s", c.container, o.Describe())
			}
			delDone(c)
		}
		if c.addrs != nil {
			if o := p.Tool("--data-dir", dataDir, "release", "crash/"+c.name, "--network", "crashnet"); o.ExitCode != 0 {
				inconsistent("release crash/%s: %s", c.name, o.Describe())
			}
			c.addrs = nil
		}
	}
	p.RequireCheckOK(t, dataDir, "after the final cleanup")
	if es := p.Held(t, dataDir); len(es) != 0 {
		inconsistent("after deleting and releasing everything, the store still lists %v", es)
	}
	f.add("iterations", iterations)
	report(t, "crash", f, fmt.Sprintf("phase 2 wall time %v", elapsed.Round(time.Millisecond)))
	// A slow machine may run out of time budget first; hundreds of kills are still required.
	if k := f.get("kills landed mid-call"); k < targetKills/2 {
		t.Errorf("only %d kills landed within the %v budget, want %d", k, budget, targetKills)
	}
}

// afterKill counts the kill and checks the store right after it.
func afterKill(t *testing.T, p *plugin, dataDir, op string, killed bool, o *outcome, f *figures, inconsistent func(string, ...any)) {
	t.Helper()
	if killed {
		f.add("kills landed mid-call", 1)
		f.add("kills landed mid-call: "+op, 1)
	} else {
		f.add("calls finished before the kill", 1)
		if o.Panicked() {
			inconsistent("%s panicked: %s", op, o.Describe())
		}
	}
	if c := p.Check(dataDir); c.ExitCode != 0 || c.Panicked() {
		inconsistent("after a kill during %s, stickyip check fails: %s", op, c.Describe())
		f.add("check failures after a kill (must be 0)", 1)
	}
}

// reservedAddrs returns the sorted addresses reserved for crash/<name>.
func reservedAddrs(es []entry, name string) []string {
	var out []string
	for _, e := range es {
		if e.Namespace == "crash" && e.Name == name {
			out = append(out, e.IP)
		}
	}
	sort.Strings(out)
	return out
}

// compareModel checks the listed store against the model, entry by entry.
func compareModel(t *testing.T, es []entry, pods []*crashPod, inconsistent func(string, ...any)) {
	t.Helper()
	byName := map[string][]entry{}
	for _, e := range es {
		if e.Namespace == "background" {
			continue // the background load's own pods, checked at the end
		}
		byName[e.Name] = append(byName[e.Name], e)
	}
	if d := duplicateIPs(es); len(d) > 0 {
		inconsistent("IP held twice: %v", d)
	}
	for _, c := range pods {
		got := byName[c.name]
		delete(byName, c.name)
		switch {
		case c.container != "":
			if !entriesAre(got, "allocated", c.container, c.addrs) {
				inconsistent("%s should be allocated to %s with %v; store lists %s", c.name, c.container, c.addrs, describeEntries(got))
			}
		case c.addrs != nil:
			if !entriesAre(got, "reserved", "", c.addrs) {
				inconsistent("%s should be reserved with %v; store lists %s", c.name, c.addrs, describeEntries(got))
			}
		default:
			if len(got) != 0 {
				inconsistent("%s holds nothing, but the store lists %s (leak)", c.name, describeEntries(got))
			}
		}
	}
	for name, got := range byName {
		inconsistent("unknown pod %q in the store: %s", name, describeEntries(got))
	}
}

func describeEntries(es []entry) string {
	if len(es) == 0 {
		return "nothing"
	}
	var parts []string
	for _, e := range es {
		parts = append(parts, fmt.Sprintf("%s %s %s", e.IP, e.State, e.ContainerID))
	}
	return strings.Join(parts, ", ")
}
