package harness

// What the harness reads of /proc and the mount table to end every process a
// runtime left and remove its directories: process trees, their cgroups,
// command lines, and the mounts under a directory.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// processTree lists roots, every process isRoot accepts (daemons that left
// their parent: shims, conmon) and all their descendants; never PID 1 or
// the test process.
func processTree(roots []int, isRoot func(pid int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if isRoot(pid) {
			roots = append(roots, pid)
		}
		if ppid := parentPID(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	queue := roots
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] || pid <= 1 || pid == os.Getpid() {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// foreignCgroups returns the cgroup directories the processes live in that
// the test process does not (the sandboxes' own cgroups), parents first.
func foreignCgroups(pids []int) []string {
	own := map[string]bool{}
	for _, d := range cgroupDirs("self") {
		own[d] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, pid := range pids {
		for _, d := range cgroupDirs(strconv.Itoa(pid)) {
			if !own[d] && !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cgroupDirs maps /proc/<pid>/cgroup to directories under /sys/fs/cgroup
// (v1 hierarchies by controller list, the v2 one as "unified" when it is
// mounted there). Root cgroups are left out.
func cgroupDirs(pid string) []string {
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[2] == "/" {
			continue
		}
		hier := strings.TrimPrefix(f[1], "name=")
		if hier == "" {
			hier = "unified"
		}
		base := filepath.Join("/sys/fs/cgroup", hier)
		if _, err := os.Stat(base); err != nil {
			if f[1] != "" {
				continue
			}
			base = "/sys/fs/cgroup" // a pure v2 host
		}
		out = append(out, filepath.Join(base, f[2]))
	}
	return out
}

func shimArgs(pid int) map[string]string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	args := strings.Split(string(data), "\x00")
	out := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			out[args[i]] = args[i+1]
		}
	}
	return out
}

// parentPID reads PPid from /proc/<pid>/status; 0 when unknown.
func parentPID(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Alive reports whether pid exists and is not a zombie (a killed shim may
// stay <defunct> a while: PID 1 here reaps slowly).
func Alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || data[i+2] != 'Z'
}

// removeUnder unmounts anything still mounted under dir (in the host's mount
// namespace) and removes dir.
func removeUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", mounts[i], err)
		}
	}
	return os.RemoveAll(dir)
}
