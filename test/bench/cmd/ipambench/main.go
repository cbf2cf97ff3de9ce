// Command ipambench runs stickyip and the upstream host-local IPAM plugin side by side on
// the same workloads, as whole plugin processes invoked the way a container runtime
// invokes them, and prints a Markdown table of latencies, throughput and targets.
//
// It is run by `make bench` (mk/bench.mk); it is not a test and never runs in `make test`.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// config is the command line.
type config struct {
	stickyipBin, hostLocalBin string
	checkpointdBin            string
	cniFloorBin               string
	plugins                   []string
	work                      string
	keep                      bool
	results                   string
	workloads                 map[int]bool
	nEmpty, nFull, nDel       int
	streams, podsPerStream    int
	reservations              int
	seedConcurrency           int
	nResv                     int
	rounds                    int
	stickyipLog               bool
	microRepo                 string
	microArgs                 string
	microTimeout              time.Duration
	strict                    bool
	output                    string // the component builds (etcd, kube-apiserver, flanneld)
	memSeconds                int
	churnPods                 int
	controllerBin             string
	statefulSets              int
}

func (c config) has(kind string) bool {
	for _, k := range c.plugins {
		if k == kind {
			return true
		}
	}
	return false
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ipambench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	var plugins, workloads string
	flag.StringVar(&cfg.stickyipBin, "stickyip", "bin/stickyip", "stickyip plugin binary")
	flag.StringVar(&cfg.checkpointdBin, "checkpointd", "bin/checkpointd", "checkpointd binary (workload 7)")
	flag.StringVar(&cfg.hostLocalBin, "host-local", ".cache/bench/bin/host-local", "upstream host-local binary")
	flag.StringVar(&cfg.cniFloorBin, "cni-floor", ".cache/bench/bin/cnifloor", "workload 1: the CNI floor, test/bench/cmd/cnifloor built as stickyip is (make bench-tools)")
	flag.StringVar(&plugins, "plugins", "host-local,stickyip", "plugins to run (comma-separated)")
	flag.StringVar(&cfg.work, "work", ".cache/bench/work", "scratch directory for data dirs (emptied first, removed after unless -keep)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the scratch directory")
	flag.StringVar(&cfg.results, "results", "results", "directory for results/bench-<timestamp>.md (\"\" = do not write)")
	flag.StringVar(&workloads, "workloads", "1,2,3,4,5,6,7,8", "workloads to run (comma-separated numbers; 9, the StatefulSets no node runs, only when named: make bench-statefulsets)")
	flag.IntVar(&cfg.nEmpty, "n-empty", 300, "workload 1: ADD+DEL pairs per plugin")
	flag.IntVar(&cfg.nFull, "n-full", 10, "workload 2: ADDs into the 99.98%-full /16 per plugin")
	flag.IntVar(&cfg.nDel, "n-del", 10, "workload 2: DELs of an unknown container with 60,000 allocations")
	flag.IntVar(&cfg.streams, "streams", 8, "workload 3: concurrent streams")
	flag.IntVar(&cfg.podsPerStream, "pods", 100, "workload 3: pods per stream")
	flag.IntVar(&cfg.rounds, "rounds", 3, "workload 3: rounds per plugin, taking turns")
	flag.IntVar(&cfg.reservations, "reservations", 10000, "workload 4: live reservations to create")
	flag.IntVar(&cfg.seedConcurrency, "seed-concurrency", 4, "workload 4: concurrent ADD+DEL streams that create the reservations")
	flag.IntVar(&cfg.nResv, "n-resv", 100, "workload 4: timed ADD+DEL pairs, before and after the reservations")
	flag.BoolVar(&cfg.stickyipLog, "stickyip-log", true, "give stickyip a logFile (as a node would) instead of stderr")
	flag.StringVar(&cfg.microRepo, "micro-repo", ".", "workload 5: module root to run the engine micro-benchmarks in")
	flag.StringVar(&cfg.microArgs, "micro-args", "-run ^$ -bench . -benchmem ./ipam/... ./reservation/...", "workload 5: go test arguments")
	flag.DurationVar(&cfg.microTimeout, "micro-timeout", 20*time.Minute, "workload 5: time limit")
	flag.BoolVar(&cfg.strict, "strict", false, "exit 1 when a target fails")
	flag.StringVar(&cfg.output, "output", harness.OutputDir(), "workload 8: where make e2e-deps put etcd, kube-apiserver (k8s/bin) and flanneld (flannel/bin)")
	flag.IntVar(&cfg.memSeconds, "mem-seconds", 60, "workload 8: seconds of resident memory and CPU samples of the settled node, once a second (and the shortest span of the churn's CPU)")
	flag.IntVar(&cfg.churnPods, "churn-pods", 20, "workload 8: pods replaced at once in the burst of churn (at most 110)")
	flag.StringVar(&cfg.controllerBin, "controller", "bin/stickyip-controller", "workload 9: stickyip-controller binary")
	flag.IntVar(&cfg.statefulSets, "statefulsets", 20000, "workload 9: StatefulSets no node runs, their status patched for -mem-seconds (one write each a minute at most)")
	flag.Parse()

	for _, p := range strings.Split(plugins, ",") {
		switch p = strings.TrimSpace(p); p {
		case kindHostLocal, kindStickyIP:
			cfg.plugins = append(cfg.plugins, p)
		case "":
		default:
			return fmt.Errorf("-plugins: unknown plugin %q (want host-local, stickyip)", p)
		}
	}
	cfg.workloads = map[int]bool{}
	for _, w := range strings.Split(workloads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 9 {
			return fmt.Errorf("-workloads: %q is not a workload number 1..9", w)
		}
		cfg.workloads[n] = true
	}
	for _, p := range []*string{&cfg.stickyipBin, &cfg.hostLocalBin, &cfg.checkpointdBin, &cfg.cniFloorBin, &cfg.controllerBin, &cfg.work, &cfg.output} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, k := range cfg.plugins {
		bin := map[string]string{kindHostLocal: cfg.hostLocalBin, kindStickyIP: cfg.stickyipBin}[k]
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s binary: %w (run `make bench`, or -plugins to leave it out)", k, err)
		}
	}
	if err := os.RemoveAll(cfg.work); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.work, 0o755); err != nil {
		return err
	}
	if !cfg.keep {
		defer os.RemoveAll(cfg.work)
	}

	netns, stopNetns, err := startNetns()
	if err != nil {
		return err
	}
	defer stopNetns()
	b := &bench{cfg: cfg, netns: netns, report: newReport(cfg.plugins)}
	b.report.machine = machine(cfg)
	if err := b.installCopies(); err != nil {
		return err
	}
	startLoad := loadavg()
	steps := []struct {
		n    int
		name string
		fn   func() error
	}{
		{1, "empty /16 ADD+DEL", b.workloadEmpty},
		{2, "99.98%-full /16 and 60k DEL", b.workloadFull},
		{3, "concurrent streams", func() error {
			err := b.workloadConcurrent()
			b.report.concurrencyTarget()
			return err
		}},
		{4, "live reservations", b.workloadReservations},
		{5, "engine micro-benchmarks", b.micro},
		{6, "switching a full /16 from host-local", b.workloadSwitch},
		{7, "damaged store on a 110-pod node", b.workloadRebuild},
		{8, "checkpointd's and flanneld's memory at 110 pods", b.workloadMemory},
		{9, "checkpointd beside StatefulSets it runs no pod of", b.workloadStatefulSets},
	}
	var failed []string
	for _, s := range steps {
		if !cfg.workloads[s.n] {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "ipambench: workload %d (%s)...\n", s.n, s.name)
		if err := s.fn(); err != nil {
			b.report.problem(fmt.Sprintf("workload %d (%s) did not complete: %v", s.n, s.name, err))
			failed = append(failed, strconv.Itoa(s.n))
		}
		fmt.Fprintf(os.Stderr, "ipambench: workload %d done in %s\n", s.n, time.Since(t0).Round(time.Millisecond))
	}

	b.report.machine = append(b.report.machine, "Load average at start: "+startLoad+"; at end: "+loadavg()+
		" (other work on the machine shows up as noise; the plugins are interleaved to share it)")
	var out bytes.Buffer
	b.report.render(&out)
	os.Stdout.Write(out.Bytes())
	if cfg.results != "" {
		if err := os.MkdirAll(cfg.results, 0o755); err != nil {
			return err
		}
		name := filepath.Join(cfg.results, "bench-"+b.report.started.Format("20060102T150405Z")+".md")
		if err := os.WriteFile(name, out.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "ipambench: wrote", name)
	}
	if len(failed) > 0 {
		return fmt.Errorf("workload(s) %s did not complete (see Problems)", strings.Join(failed, ","))
	}
	if cfg.strict && b.report.failed() {
		return errors.New("a target failed")
	}
	return nil
}

// installCopies has every plugin the workloads time run from a copy of its
// binary in the work directory, written as an installation writes it (cp,
// install, a container image's layer): on this machine a binary that the Go
// linker wrote in place (go build -o, go install) started 9-13% slower than
// a copy of the same bytes, which is what nodes run.
func (b *bench) installCopies() error {
	dir := filepath.Join(b.cfg.work, "bin")
	for name, p := range map[string]*string{kindStickyIP: &b.cfg.stickyipBin, kindHostLocal: &b.cfg.hostLocalBin, "cnifloor": &b.cfg.cniFloorBin} {
		if _, err := os.Stat(*p); err != nil {
			continue // not run, or reported where it is used
		}
		c, err := installCopy(*p, dir, name)
		if err != nil {
			return err
		}
		*p = c
	}
	return nil
}

// installCopy copies the executable src to dir/name and returns the copy.
func installCopy(src, dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return "", err
	}
	return dst, nil
}

// micro is workload 5: the engine's go test benchmarks, output included verbatim.
func (b *bench) micro() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.microTimeout)
	defer cancel()
	args := append([]string{"test"}, strings.Fields(b.cfg.microArgs)...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = b.cfg.microRepo
	out, err := cmd.CombinedOutput()
	b.report.micro = "$ go " + strings.Join(args, " ") + "\n" + string(out)
	if err != nil {
		return fmt.Errorf("go %s: %v", strings.Join(args, " "), err)
	}
	return nil
}

// machine describes where the figures come from.
func machine(cfg config) []string {
	var m []string
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				m = append(m, "CPU: "+strings.TrimSpace(strings.SplitN(line, ":", 2)[1])+fmt.Sprintf(", %d cores", runtime.NumCPU()))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m = append(m, "Kernel: "+strings.TrimSpace(string(b)))
	}
	m = append(m, "Data dirs on: "+fsType(cfg.work)+" ("+cfg.work+")")
	m = append(m, "Driver built with "+runtime.Version())
	if cfg.has(kindHostLocal) {
		m = append(m, "host-local: "+moduleOf(cfg.hostLocalBin)+"; "+versionOf(cfg.hostLocalBin, nil))
	}
	if cfg.has(kindStickyIP) {
		m = append(m, "stickyip: "+versionOf(cfg.stickyipBin, []string{"version"}))
	}
	return m
}

// versionOf runs bin (without CNI_COMMAND) and returns the first line it prints.
func versionOf(bin string, args []string) string {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	out, _ := cmd.CombinedOutput()
	line := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if line == "" {
		line = "(no version output)"
	}
	return line + " — " + bin
}

// moduleOf returns the main module and version a Go binary was built from.
func moduleOf(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return "module unknown"
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "mod" {
			return f[1] + " " + f[2]
		}
	}
	return "module unknown"
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{0xEF53: "ext4", 0x01021994: "tmpfs", 0x794c7630: "overlayfs", 0x58465342: "xfs", 0x9123683e: "btrfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("fs type %#x", st.Type)
}
