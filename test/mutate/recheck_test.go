package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `package p

const limit = 256 * 1024

var hook = func(n int) bool { return n > 1 }

func f(n int) int {
	switch {
	case n > limit:
		return n - 1
	}
	if n < 0 {
		return -n
	}
	return n
}
`

func TestUncounted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.go")
	if err := os.WriteFile(path, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line, col int
		want      bool
	}{
		{3, 19, true},   // the constant's *
		{5, 40, false},  // > in a function literal: counted
		{9, 9, true},    // > in the case clause
		{10, 12, false}, // - in the case's body: counted
		{12, 7, false},  // < in an if: counted
	} {
		got, err := uncounted(path, tc.line, tc.col)
		if err != nil || got != tc.want {
			t.Errorf("%d:%d: %v (%v), want %v", tc.line, tc.col, got, err, tc.want)
		}
	}
}

func TestMutate(t *testing.T) {
	for _, tc := range []struct {
		m       mutant
		want    string // the mutated line
		wantErr bool
	}{
		{m: mutant{line: 3, col: 19, kind: "ARITHMETIC_BASE"}, want: "const limit = 256 / 1024"},
		{m: mutant{line: 9, col: 9, kind: "CONDITIONALS_BOUNDARY"}, want: "\tcase n >= limit:"},
		{m: mutant{line: 9, col: 9, kind: "CONDITIONALS_NEGATION"}, want: "\tcase n <= limit:"},
		{m: mutant{line: 13, col: 10, kind: "INVERT_NEGATIVES"}, want: "\t\treturn +n"},
		{m: mutant{line: 9, col: 9, kind: "INCREMENT_DECREMENT"}, wantErr: true},
		{m: mutant{line: 9, col: 8, kind: "CONDITIONALS_NEGATION"}, wantErr: true},
	} {
		out, err := mutate([]byte(sample), tc.m)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.m)
			}
			continue
		}
		lines := strings.Split(string(out), "\n")
		if err != nil || len(lines) < tc.m.line || lines[tc.m.line-1] != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.m, lines[tc.m.line-1], err, tc.want)
		}
	}
}
