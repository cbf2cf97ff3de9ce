package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sourceCopy copies the repository's files (tracked and new, as git lists
// them: no build outputs or caches) into a temporary directory for
// gremlins, which copies its module once per worker and runs the coverage
// in place: the working tree may change while it runs.
func sourceCopy() (string, func(), error) {
	list, err := git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "stickyip-mutate-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	for _, f := range splitNUL(list) {
		if err := copyFile(f, filepath.Join(dir, f)); err != nil {
			cleanup()
			return "", nil, err
		}
	}
	return dir, cleanup, nil
}

// copyFile copies the regular file src to dst; a file git lists but the
// working tree has deleted is left out.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// unleash runs gremlins on pkg in the copy src, its output in o.out
// (pkg.log, and the report pkg.json it returns).
func unleash(ctx context.Context, o options, src, pkg string) (*report, error) {
	out, err := filepath.Abs(o.out)
	if err != nil {
		return nil, err
	}
	name := filepath.Join(out, strings.ReplaceAll(pkg, "/", "_"))
	logFile, err := os.Create(name + ".log")
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := []string{"unleash", "--workers", strconv.Itoa(o.workers), "--timeout-coefficient", strconv.Itoa(o.timeoutCoefficient), "-o", name + ".json"}
	for _, f := range o.skip {
		if path.Dir(f) == pkg { // gremlins matches the file's path in the package
			args = append(args, "--exclude-files", "^"+regexp.QuoteMeta(path.Base(f))+"$")
		}
	}
	cmd := exec.CommandContext(ctx, o.gremlins, append(args, "./"+pkg)...)
	cmd.Dir = src
	// A test result from the cache would make the coverage run, which
	// sets every mutant's timeout, take no time at all.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -count=1"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Interrupted, gremlins is asked to stop as on Ctrl-C: it removes its
	// copies of the module.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gremlins: %w (its output: %s.log)", err, name)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return readReport(name + ".json")
}
