// Command cp is the `cp` of the e2e's offline flannel images (nothing can be
// pulled on the test machines): kube-flannel.yml's install-cni-plugin
// container runs `cp -f /flannel /opt/cni/bin/flannel`. It is static, so the
// images need no C library for it.
//
//	cp [-f] SOURCE DEST
//
// DEST may be a file or an existing directory (the file is then created in
// it under SOURCE's name). The copy is written to a temporary file next to
// DEST, synced, given SOURCE's permission bits and renamed over DEST, so a
// DEST that a runtime is executing, or a symlink, is replaced rather than
// written through. -f is accepted for compatibility: the copy always
// replaces DEST.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cp:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var paths []string
	for _, a := range args {
		switch {
		case a == "-f" || a == "--force":
		case len(a) > 1 && a[0] == '-':
			return fmt.Errorf("unsupported option %s (usage: cp [-f] SOURCE DEST)", a)
		default:
			paths = append(paths, a)
		}
	}
	if len(paths) != 2 {
		return fmt.Errorf("want SOURCE and DEST, got %q (usage: cp [-f] SOURCE DEST)", paths)
	}
	src, dst := paths[0], paths[1]
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, filepath.Base(src))
	}
	return copyFile(src, dst)
}

// copyFile copies src to dst through a temporary file renamed into place.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
