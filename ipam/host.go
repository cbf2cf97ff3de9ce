package ipam

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HostEnv returns the engine environment of this machine: the kernel's boot ID
// and boot time, and a network-namespace liveness check. Its clock is in
// UTC: records store the same instants, and a plugin process does not load
// the local time zone to write them (/etc/localtime, on every call).
func HostEnv(log *slog.Logger) Env {
	return Env{Now: nowUTC, BootID: bootID(), BootTime: bootTime, SandboxGone: NetnsGone, Log: log}
}

func nowUTC() time.Time { return time.Now().UTC() }

// bootID reads the kernel's boot ID with plain system calls: os.ReadFile
// would offer the file to the runtime's poller first, four more calls in
// every plugin process. A procfs read of a file this small returns it
// whole, and neither call blocks.
func bootID() string {
	fd, err := unix.Open("/proc/sys/kernel/random/boot_id", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var b [64]byte // 36 characters and a newline
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b[:n]))
}

func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if s, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64); err == nil {
				return time.Unix(s, 0).UTC()
			}
		}
	}
	return time.Time{}
}

// NetnsGone reports whether a sandbox's network namespace path no longer names
// a live sandbox: the path is missing while its directory is there (the
// runtime removed it, or the node rebooted and /run is new). Anything in doubt
// counts as alive, so a running pod's address is never taken: a missing
// directory (the caller may be in another mount namespace that lacks it) and a
// plain file where a namespace bind mount should be (the caller may not see
// the runtime's mounts).
func NetnsGone(path string) bool {
	_, err := os.Lstat(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_, err = os.Stat(filepath.Dir(path))
	return err == nil
}
