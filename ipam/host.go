package ipam

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HostEnv returns the engine environment of this machine: the kernel's boot ID
// and boot time, and a network-namespace liveness check.
func HostEnv(log *slog.Logger) Env {
	return Env{Now: time.Now, BootID: bootID(), BootTime: bootTime(), SandboxGone: NetnsGone, Log: log}
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil {
				return time.Unix(s, 0)
			}
		}
	}
	return time.Time{}
}

// NetnsGone reports whether a sandbox's network namespace path no longer names
// a network namespace: the path is missing, or is a plain file left behind
// after the namespace's bind mount went away (as after a reboot). Any other
// doubt counts as alive, so a running pod's address is never taken.
func NetnsGone(path string) bool {
	var st unix.Statfs_t
	err := unix.Statfs(path, &st)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT) {
		return true
	}
	if err != nil {
		return false
	}
	switch st.Type {
	case unix.NSFS_MAGIC, unix.PROC_SUPER_MAGIC:
		return false
	}
	return true
}
