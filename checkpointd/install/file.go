// Package install puts stickyip on a node from its container image (issue
// 18): the plugin binary into the CNI bin directory, atomically, and
// checkpointd as a static pod of the kubelet, the form that starts after a
// reboot with no API server. `checkpointd install` and `checkpointd
// uninstall` wire it to flags; the DaemonSet in deploy/install runs them.
//
// Nothing here touches the IPAM store or the reservations: a new plugin
// migrates the store's schema on its first call, as a `make install` does.
package install

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// WriteFile makes path hold data with permission mode, atomically
// (safefile.Write: a temporary dot file in the same directory,
// synced, renamed over path, the directory synced), so whoever opens or
// executes path meanwhile gets the old file or the new one, never a partial
// one, and a power cut leaves one of the two. When path already holds data
// with that mode it does nothing (same inode, same mtime) and returns false.
// Temporary files an installer killed mid-write left behind are removed.
func WriteFile(path string, data []byte, mode os.FileMode) (changed bool, err error) {
	if same(path, data, mode) {
		return false, nil
	}
	removeLeftovers(path)
	if err := safefile.Write(path, data, mode); err != nil {
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	return true, nil
}

// Remove removes path and syncs its directory; a missing file is no error.
// It reports whether it removed something.
func Remove(path string) (bool, error) {
	if err := os.Remove(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, safefile.SyncDir(filepath.Dir(path))
}

// same reports whether path is a regular file holding data with mode.
func same(path string, data []byte, mode os.FileMode) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != mode.Perm() || st.Size() != int64(len(data)) {
		return false
	}
	old, err := os.ReadFile(path)
	return err == nil && bytes.Equal(old, data)
}

// removeLeftovers removes the temporary files of path
// (safefile.Write's ".<name>.*") left in its directory.
func removeLeftovers(path string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+base+".") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
