package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseEquivalent(t *testing.T) {
	for _, tc := range []struct {
		line    string
		pkg     string
		m       mutant
		why     string
		wantErr string
	}{
		{line: "ipam engine.go:12:3 CONDITIONALS_BOUNDARY a log text only", pkg: "ipam",
			m: mutant{file: "engine.go", line: 12, col: 3, kind: "CONDITIONALS_BOUNDARY"}, why: "a log text only"},
		{line: "ipam engine.go:12:3 CONDITIONALS_BOUNDARY", wantErr: "want package file:line:col MUTATOR why"},
		{line: "ipam engine.go:12 CONDITIONALS_BOUNDARY why", wantErr: "want file:line:col"},
		{line: "ipam engine.go:x:3 CONDITIONALS_BOUNDARY why", wantErr: "positive numbers"},
		{line: "ipam engine.go:0:3 CONDITIONALS_BOUNDARY why", wantErr: "positive numbers"},
		{line: "ipam engine.go:1:3 CONDITIONAL_BOUNDARY why", wantErr: "not a gremlins mutator"},
	} {
		pkg, m, why, err := parseEquivalent(tc.line)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.line, err, tc.wantErr)
			}
			continue
		}
		if err != nil || pkg != tc.pkg || m != tc.m || why != tc.why {
			t.Errorf("%q: %q %v %q (%v), want %q %v %q", tc.line, pkg, m, why, err, tc.pkg, tc.m, tc.why)
		}
	}
}

func TestReadEquivalentsRefusesDuplicates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eq.txt")
	body := "# comment\n\nipam a.go:1:2 INVERT_NEGATIVES one\nipam a.go:1:2 INVERT_NEGATIVES two\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readEquivalents(path); err == nil || !strings.Contains(err.Error(), ":4: ipam a.go:1:2 INVERT_NEGATIVES listed twice") {
		t.Fatalf("a mutant listed twice: %v, want an error naming line 4", err)
	}
}

// The checked-in list parses, and each of its mutants is at a line and
// column of a file that exists (the run itself tells whether it still
// lives there).
func TestEquivalentsFile(t *testing.T) {
	eq, err := readEquivalents("equivalent.txt")
	if err != nil {
		t.Fatal(err)
	}
	for pkg, ms := range eq {
		for m, why := range ms {
			if why == "" {
				t.Errorf("%s %s: no reason", pkg, m)
			}
			f, err := os.Open(filepath.Join("..", "..", pkg, m.file))
			if err != nil {
				t.Errorf("%s %s: %v", pkg, m, err)
				continue
			}
			sc := bufio.NewScanner(f)
			line := ""
			for n := 0; n < m.line && sc.Scan(); n++ {
				line = sc.Text()
			}
			f.Close()
			// gremlins counts a tab as one column.
			if len(line) < m.col {
				t.Errorf("%s %s: the file has no such line and column", pkg, m)
			}
		}
	}
}
