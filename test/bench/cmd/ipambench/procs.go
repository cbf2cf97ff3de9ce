package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is a long-running process the driver started, inside a network
// namespace (nsenter execs it: its PID is the daemon's), stopped by its PID.
type daemon struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startDaemon starts argv in the network namespace nsPath with env added,
// its output to logPath.
func startDaemon(name, nsPath, logPath string, env []string, argv ...string) (*daemon, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--"}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		f.Close()
		close(d.done)
	}()
	return d, nil
}

// exited returns an error once the daemon has exited.
func (d *daemon) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s exited (%v): %s", d.name, d.err, tail(d.log, 15))
	default:
		return nil
	}
}

// stop sends SIGTERM, then SIGKILL after 10 s, to the daemon's process group
// (by the daemon's PID) and waits for it.
func (d *daemon) stop() {
	if d == nil || d.exited() != nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

// memStatus is a process's memory as /proc/<pid>/status reports it, in
// bytes: VmRSS (resident now: RssAnon, the heap and stacks, plus RssFile,
// the pages of its binary it touched) and VmHWM (the highest VmRSS so far).
type memStatus struct {
	rss, anon, file, hwm int64
}

// memory reads the daemon's memStatus.
func (d *daemon) memory() (memStatus, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return memStatus{}, err
	}
	defer f.Close()
	var m memStatus
	fields := map[string]*int64{"VmRSS": &m.rss, "RssAnon": &m.anon, "RssFile": &m.file, "VmHWM": &m.hwm}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if p := fields[k]; ok && p != nil {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return memStatus{}, fmt.Errorf("%s: %q: %w", k, v, err)
			}
			*p = kb << 10
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		return memStatus{}, errors.New("no VmRSS/VmHWM in /proc/<pid>/status")
	}
	return m, sc.Err()
}

// cpu returns the CPU time the daemon has used (user and system): the
// sum of its threads' run time in nanoseconds (/proc/<pid>/task/*/schedstat),
// or, when that is less (a thread that exited takes its time with it), the
// process's utime and stime (/proc/<pid>/stat), which count exited threads
// too but in clock ticks of 10 ms: too coarse for a daemon that uses 60 ms
// in a minute.
func (d *daemon) cpu() (time.Duration, error) {
	pid := d.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	ticks, err := statTicks(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	byTicks := time.Duration(ticks) * time.Second / clockTicks
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return byTicks, nil
	}
	var run time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		ns, err := schedstatRun(b)
		if err != nil {
			return byTicks, nil
		}
		run += ns
	}
	return max(run, byTicks), nil
}

// statTicks returns utime + stime, in clock ticks, from the content of
// /proc/<pid>/stat.
func statTicks(b []byte) (int64, error) {
	// Fields after the command name (in parentheses, which may hold
	// spaces and parentheses: the last ')' ends it): state is the 1st,
	// utime the 12th, stime the 13th.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("%q: too few fields", b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return ticks, nil
}

// schedstatRun returns a thread's time on a CPU from the content of its
// /proc/<pid>/task/<tid>/schedstat (its first field, in nanoseconds).
func schedstatRun(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want 3 fields", b)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", b, err)
	}
	return time.Duration(ns), nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
