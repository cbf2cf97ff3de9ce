package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path"
	"slices"
	"strings"
)

// changedFiles returns the files changed since the merge base of base and
// HEAD: committed, staged, in the working tree, and new files git does not
// ignore.
func changedFiles(base string) ([]string, error) {
	mb, err := git("merge-base", base, "HEAD")
	if err != nil {
		return nil, err
	}
	diff, err := git("diff", "--name-only", "-z", strings.TrimSpace(string(mb)))
	if err != nil {
		return nil, err
	}
	untracked, err := git("ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	return append(splitNUL(diff), splitNUL(untracked)...), nil
}

// touched returns the packages of pkgs with a file among changed: a file
// directly in the package's directory (its tests and testdata included),
// not in a package below it.
func touched(pkgs, changed []string) []string {
	var out []string
	for _, pkg := range pkgs {
		if slices.ContainsFunc(changed, func(f string) bool { return inPackage(pkg, f) }) {
			out = append(out, pkg)
		}
	}
	return out
}

// inPackage reports whether file (a path from the repository's top)
// belongs to the package in directory pkg.
func inPackage(pkg, file string) bool {
	dir := path.Dir(file)
	return dir == pkg || dir == pkg+"/testdata" || strings.HasPrefix(dir, pkg+"/testdata/")
}

// git runs git with args in the current directory.
func git(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

func splitNUL(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
