// Package safefile writes the files checkpointd must be able to trust
// after a crash or a power cut: atomically (Write, SyncDir), and, for files
// read back later, framed with their format, length and checksum (Frame,
// Unframe).
package safefile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data: it writes a temporary file in the
// same directory (named with a leading dot, which the kubelet's static pod
// source ignores), fsyncs it, renames it over path and fsyncs the directory.
func Write(path string, data []byte, mode os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := io.Copy(f, bytes.NewReader(data)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, so a rename or removal in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
