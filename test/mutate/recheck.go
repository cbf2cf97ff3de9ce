package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Go's coverage profile counts blocks of statements: a case clause's
// expressions, a constant's value, or the rest of a statement after a
// function literal are in none, and gremlins reports a mutant there as not
// covered even when the tests run it. test/mutate runs those mutants
// itself: the ones in no block of the profile, counted or not (a mutant in
// a block no test reached is not covered).

// block is a block of a coverage profile: from line.col to line.col.
type block struct{ startLine, startCol, endLine, endCol int }

// holds reports whether line:col is in b, as gremlins reads a profile.
func (b block) holds(line, col int) bool {
	switch {
	case line > b.startLine && line < b.endLine:
		return true
	case b.startLine == b.endLine:
		return line == b.startLine && col >= b.startCol && col <= b.endCol
	default:
		return line == b.startLine && col >= b.startCol || line == b.endLine && col <= b.endCol
	}
}

// readProfile returns the blocks of a coverage profile by file name
// (import path and file).
func readProfile(data []byte) (map[string][]block, error) {
	blocks := map[string][]block{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "mode:") {
			continue
		}
		var file string
		var b block
		var stmts, count int
		colon := strings.LastIndex(line, ":")
		if colon < 0 {
			return nil, fmt.Errorf("coverage profile line %q", line)
		}
		file = line[:colon]
		if _, err := fmt.Sscanf(line[colon+1:], "%d.%d,%d.%d %d %d", &b.startLine, &b.startCol, &b.endLine, &b.endCol, &stmts, &count); err != nil {
			return nil, fmt.Errorf("coverage profile line %q: %v", line, err)
		}
		blocks[file] = append(blocks[file], b)
	}
	return blocks, nil
}

// mutations are what each of gremlins' default mutators makes of a token.
var mutations = map[string]map[token.Token]token.Token{
	"ARITHMETIC_BASE":       {token.ADD: token.SUB, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL, token.SUB: token.ADD},
	"CONDITIONALS_BOUNDARY": {token.GEQ: token.GTR, token.GTR: token.GEQ, token.LEQ: token.LSS, token.LSS: token.LEQ},
	"CONDITIONALS_NEGATION": {token.EQL: token.NEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR, token.LSS: token.GEQ, token.NEQ: token.EQL},
	"INCREMENT_DECREMENT":   {token.DEC: token.INC, token.INC: token.DEC},
	"INVERT_NEGATIVES":      {token.SUB: token.ADD},
}

// mutate returns src with the mutation m applied to the token at its
// line and column.
func mutate(src []byte, m mutant) ([]byte, error) {
	fset := token.NewFileSet()
	file := fset.AddFile(m.file, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, 0)
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			return nil, fmt.Errorf("%s: no token at %d:%d", m.file, m.line, m.col)
		}
		if p := fset.Position(pos); p.Line != m.line || p.Column != m.col {
			continue
		}
		to, ok := mutations[m.kind][tok]
		if !ok {
			return nil, fmt.Errorf("%s: %s does not apply to %q", m, m.kind, tok)
		}
		off := file.Offset(pos)
		return append(append(append([]byte(nil), src[:off]...), to.String()...), src[off+len(tok.String()):]...), nil
	}
}

// retester runs the tests of one package, in the copy src, on mutants.
type retester struct {
	src, pkg string
	timeout  time.Duration
}

// newRetester runs pkg's tests once, unmutated, with a coverage profile:
// it returns the profile's blocks, and a retester whose runs may take
// coefficient times as long as this one.
func newRetester(ctx context.Context, src, pkg string, coefficient int) (*retester, map[string][]block, error) {
	r := &retester{src: src, pkg: pkg, timeout: 10 * time.Minute}
	profile := filepath.Join(src, "mutate-cover.out")
	defer os.Remove(profile)
	start := time.Now()
	if status, out := r.test(ctx, "-coverprofile="+profile); status != "LIVED" {
		return nil, nil, fmt.Errorf("the tests of %s fail unmutated: %s", pkg, out)
	}
	r.timeout = max(time.Duration(coefficient)*time.Since(start), 30*time.Second)
	data, err := os.ReadFile(profile)
	if err != nil {
		return nil, nil, err
	}
	blocks, err := readProfile(data)
	return r, blocks, err
}

// with applies m, runs fn, puts the file back, and returns fn's status.
func (r *retester) with(m mutant, fn func() string) (string, error) {
	path := filepath.Join(r.src, r.pkg, m.file)
	src, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	mutated, err := mutate(src, m)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return "", err
	}
	status := fn()
	return status, os.WriteFile(path, src, 0o644)
}

// builds compiles the package: "NOT VIABLE" when it does not compile, else
// "NOT COVERED" (what a mutant no test reaches is).
func (r *retester) builds(ctx context.Context) string {
	cmd := exec.CommandContext(ctx, "go", "build", "./"+r.pkg)
	cmd.Dir = r.src
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		return "NOT VIABLE"
	}
	return "NOT COVERED"
}

// test runs the package's tests once, with flags.
func (r *retester) test(ctx context.Context, flags ...string) (status string, output []byte) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"test", "-count=1", "-failfast"}, flags...), "./"+r.pkg)...)
	cmd.Dir = r.src
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "LIVED", out
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "TIMED OUT", out
	case errors.As(err, &exit) && bytes.Contains(out, []byte("[build failed]")):
		return "NOT VIABLE", out
	default:
		return "KILLED", out
	}
}

// recheck runs the mutants of rep that gremlins counts as not covered
// only because the profile has no block where they are, and records their
// status in rep. It returns how many it ran and how many of those the
// tests killed. An arithmetic mutant no test reaches is compiled: one that
// does not compile (a string's +) is no mutant, as gremlins counts one it
// runs.
func recheck(ctx context.Context, src, pkg string, rep *report, coefficient int) (ran, killed int, err error) {
	if !slices.ContainsFunc(rep.Files, func(f reportFile) bool {
		return slices.ContainsFunc(f.Mutations, func(m reportMutation) bool { return m.Status == "NOT COVERED" })
	}) {
		return 0, 0, nil
	}
	r, blocks, err := newRetester(ctx, src, pkg, coefficient)
	if err != nil {
		return 0, 0, err
	}
	for i := range rep.Files {
		file := &rep.Files[i]
		var fileBlocks []block
		for name, bs := range blocks {
			if strings.HasSuffix(name, "/"+pkg+"/"+file.Name) {
				fileBlocks = bs
			}
		}
		for j := range file.Mutations {
			m := &file.Mutations[j]
			if m.Status != "NOT COVERED" {
				continue
			}
			id := mutant{file: file.Name, line: m.Line, col: m.Column, kind: m.Type}
			if slices.ContainsFunc(fileBlocks, func(b block) bool { return b.holds(m.Line, m.Column) }) {
				if m.Type == "ARITHMETIC_BASE" {
					if m.Status, err = r.with(id, func() string { return r.builds(ctx) }); err != nil {
						return ran, killed, err
					}
				}
				continue
			}
			if m.Status, err = r.with(id, func() string { status, _ := r.test(ctx); return status }); err != nil {
				return ran, killed, err
			}
			ran++
			if m.Status == "KILLED" {
				killed++
			}
		}
	}
	return ran, killed, ctx.Err()
}
