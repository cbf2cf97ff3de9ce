package main

import (
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

// The blocks of a profile for sample, as go test -coverprofile writes
// them: the case clause's expression (line 9), the constant (line 3) and
// the rest of line 12 are in none.
const sampleProfile = `mode: set
example.com/p/p.go:5.29,5.45 1 1
example.com/p/p.go:7.20,8.9 1 1
example.com/p/p.go:9.17,10.15 1 0
example.com/p/p.go:12.2,12.11 1 1
example.com/p/p.go:12.11,14.3 1 0
example.com/p/p.go:15.2,15.10 1 1
`

func TestProfileBlocks(t *testing.T) {
	blocks, err := readProfile([]byte(sampleProfile))
	if err != nil {
		t.Fatal(err)
	}
	bs := blocks["example.com/p/p.go"]
	in := func(line, col int) bool {
		for _, b := range bs {
			if b.holds(line, col) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		line, col int
		want      bool
	}{
		{3, 19, false}, // the constant's *
		{5, 40, true},  // > in a function literal
		{9, 9, false},  // > in the case clause
		{10, 12, true}, // - in the case's body (a block no test reached)
		{12, 7, true},  // < in an if
		{13, 10, true}, // - inside the if's body
		{16, 1, false},
	} {
		if got := in(tc.line, tc.col); got != tc.want {
			t.Errorf("%d:%d in a block: %v, want %v", tc.line, tc.col, got, tc.want)
		}
	}
	if _, err := readProfile([]byte("mode: set\nno colon here\n")); err == nil {
		t.Error("a line without position read without error")
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
