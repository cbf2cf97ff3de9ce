// Package boot keeps what checkpointd knows of the node's boots: which
// parent pods the API server listed during this boot (Tracker, on tmpfs) and
// when the API server last answered (Clock, on disk).
//
// The Tracker remembers, for the current boot of the node, which parent pods
// the API server has listed as bound to this node. The kubelet learns its API
// pods from the same API server: a pod listed during this boot is known to the
// kubelet, which runs it, restarts it, or stopped it on purpose (completed,
// evicted, deleted), so checkpointd must never restore it. After a reboot the
// kubelet knows no API pod until the API server answers; that is when
// restoring is right.
//
// The list lives in a file on tmpfs (checkpointd's --volume-dir, under /run),
// which a reboot empties, and records the kernel's boot ID, so a file that
// survived on a persistent disk by mistake is not taken for this boot.
package boot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// FileName is the tracker's file inside its directory. It has no '_', so it
// never collides with a copy's volume directory (<namespace>_<name>).
const FileName = "boot.json"

// KernelBootIDPath is where Linux publishes the current boot's ID.
const KernelBootIDPath = "/proc/sys/kernel/random/boot_id"

type file struct {
	KernelBootID string   `json:"kernelBootID"`
	Seen         []string `json:"seen"`
}

// Tracker is the per-boot list of parents the API server listed here.
type Tracker struct {
	path   string
	kernel string
	seen   []string
	fresh  bool
}

// Open reads the tracker kept in dir (creating dir, 0700). A missing file or
// a file of another kernel boot starts a new boot with an empty list. A file
// that cannot be read or parsed is an error: an empty list would allow
// restores, so checkpointd does not guess.
func Open(dir, kernelBootID string) (*Tracker, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	t := &Tracker{path: filepath.Join(dir, FileName), kernel: kernelBootID}
	data, err := os.ReadFile(t.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		t.fresh = true
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", t.path, err)
	default:
		var f file
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("%s is damaged (%v); remove it only after a reboot", t.path, err)
		}
		if f.KernelBootID != kernelBootID {
			t.fresh = true
		} else {
			t.seen = f.Seen
		}
	}
	if t.fresh {
		if err := t.write(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// KernelBootID reads the kernel's boot ID ("" when it cannot be read).
func KernelBootID() string {
	b, err := os.ReadFile(KernelBootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Fresh reports whether this process found no record of the current boot
// (the node rebooted, or checkpointd runs for the first time this boot).
func (t *Tracker) Fresh() bool { return t.fresh }

// Seen reports whether the API server listed id as bound here this boot.
func (t *Tracker) Seen(id string) bool {
	_, found := slices.BinarySearch(t.seen, id)
	return found
}

// MarkSeen adds ids to the list and writes it when it changed.
func (t *Tracker) MarkSeen(ids ...string) error {
	changed := false
	for _, id := range ids {
		if i, found := slices.BinarySearch(t.seen, id); !found {
			t.seen = slices.Insert(t.seen, i, id)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return t.write()
}

func (t *Tracker) write() error {
	data, err := json.Marshal(file{KernelBootID: t.kernel, Seen: t.seen})
	if err != nil {
		return err
	}
	return safefile.Write(t.path, data, 0o600)
}

// OnTmpfs reports whether dir is on a memory file system, which a reboot
// empties (the tracker relies on it when the kernel boot ID is unavailable,
// and restored secrets should never reach a disk).
func OnTmpfs(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
