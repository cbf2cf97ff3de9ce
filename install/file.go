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
)

// tmpMarker is in the name of every temporary file the installer writes next
// to its target: ".<name><tmpMarker><random>". A runtime never executes it
// (it looks plugins up by type name), and the next install removes leftovers.
const tmpMarker = ".tmp-"

// WriteFile makes path hold data with permission mode, atomically: it writes
// a temporary file in the same directory, syncs it, renames it over path and
// syncs the directory, so whoever opens or executes path meanwhile gets the
// old file or the new one, never a partial one, and a power cut leaves one of
// the two. When path already holds data with that mode it does nothing (same
// inode, same mtime) and returns false.
func WriteFile(path string, data []byte, mode os.FileMode) (changed bool, err error) {
	if same(path, data, mode) {
		return false, nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	removeLeftovers(dir, base)
	f, err := os.CreateTemp(dir, "."+base+tmpMarker)
	if err != nil {
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
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
	return true, syncDir(filepath.Dir(path))
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

// removeLeftovers removes temporary files of base that an installer killed
// mid-write left in dir.
func removeLeftovers(dir, base string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "."+base+tmpMarker) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
