package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Go's coverage profile counts statements, so gremlins reports a mutant
// in a case clause's expressions, or in a constant's value, as not covered
// even when the tests run it. test/mutate runs those mutants itself.

// uncounted reports whether line:col of the Go file path lies where the
// coverage profile counts nothing: a case clause's expressions, or a
// declaration outside every function.
func uncounted(path string, line, col int) (bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return false, err
	}
	in := func(n ast.Node) bool {
		start, end := fset.Position(n.Pos()), fset.Position(n.End())
		return before(start.Line, start.Column, line, col) && before(line, col+1, end.Line, end.Column)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && in(g) {
			// A function literal's statements are counted.
			found := true
			ast.Inspect(g, func(n ast.Node) bool {
				if fl, ok := n.(*ast.FuncLit); ok && in(fl.Body) {
					found = false
				}
				return found
			})
			return found, nil
		}
	}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if cc, ok := n.(*ast.CaseClause); ok {
			for _, e := range cc.List {
				found = found || in(e)
			}
		}
		return !found
	})
	return found, nil
}

// before reports whether line:col a is at or before line:col b.
func before(aLine, aCol, bLine, bCol int) bool {
	return aLine < bLine || aLine == bLine && aCol <= bCol
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

// newRetester times one run of pkg's tests, unmutated; a mutant's run may
// take coefficient times as long.
func newRetester(ctx context.Context, src, pkg string, coefficient int) (*retester, error) {
	r := &retester{src: src, pkg: pkg, timeout: 10 * time.Minute}
	start := time.Now()
	if status, out := r.test(ctx); status != "LIVED" {
		return nil, fmt.Errorf("the tests of %s fail unmutated: %s", pkg, out)
	}
	r.timeout = max(time.Duration(coefficient)*time.Since(start), 30*time.Second)
	return r, nil
}

// status applies m, runs the tests, puts the file back, and returns the
// mutant's status as gremlins names them.
func (r *retester) status(ctx context.Context, m mutant) (string, error) {
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
	status, _ := r.test(ctx)
	return status, os.WriteFile(path, src, 0o644)
}

// test runs the package's tests once.
func (r *retester) test(ctx context.Context) (status string, output []byte) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-failfast", "./"+r.pkg)
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
// only because the profile counts nothing where they are, and records
// their status in rep. It returns how many it ran and how many of those
// the tests killed.
func recheck(ctx context.Context, src, pkg string, rep *report, coefficient int) (ran, killed int, err error) {
	var r *retester
	for i := range rep.Files {
		file := &rep.Files[i]
		for j := range file.Mutations {
			m := &file.Mutations[j]
			if m.Status != "NOT COVERED" {
				continue
			}
			id := mutant{file: file.Name, line: m.Line, col: m.Column, kind: m.Type}
			if ok, err := uncounted(filepath.Join(src, pkg, file.Name), m.Line, m.Column); err != nil || !ok {
				if err != nil {
					return ran, killed, err
				}
				continue
			}
			if r == nil {
				if r, err = newRetester(ctx, src, pkg, coefficient); err != nil {
					return ran, killed, err
				}
			}
			if m.Status, err = r.status(ctx, id); err != nil {
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
