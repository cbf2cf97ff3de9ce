package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// gremlinsReport is a report as gremlins writes it (-o), for one file.
func gremlinsReport(t *testing.T, file string, mutations ...string) *report {
	t.Helper()
	var ms []map[string]any
	for _, m := range mutations { // "line:col TYPE STATUS"
		f := strings.SplitN(m, " ", 3)
		var line, col int
		if _, err := fmt.Sscanf(f[0], "%d:%d", &line, &col); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, map[string]any{"line": line, "column": col, "type": f[1], "status": f[2]})
	}
	b, _ := json.Marshal(map[string]any{"go_module": "m", "files": []any{map[string]any{"file_name": file, "mutations": ms}}})
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestJudge(t *testing.T) {
	ten := func(status string) []string {
		var out []string
		for i := range 10 {
			out = append(out, strconv.Itoa(100+i)+":1 ARITHMETIC_BASE "+status)
		}
		return out
	}
	eqLived := map[mutant]string{{file: "a.go", line: 7, col: 2, kind: "CONDITIONALS_BOUNDARY"}: "a log text"}
	for _, tc := range []struct {
		name               string
		mutations          []string
		eq                 map[mutant]string
		killed, lived      int
		efficacy, coverage float64
		failures           []string
	}{{
		name:      "all killed",
		mutations: ten("KILLED"),
		killed:    10, efficacy: 100, coverage: 100,
	}, {
		name:      "one lived of ten: 90 % passes",
		mutations: append(ten("KILLED")[:9], "7:2 CONDITIONALS_BOUNDARY LIVED"),
		killed:    9, lived: 1, efficacy: 90, coverage: 100,
	}, {
		name:      "the one that lived listed as equivalent",
		mutations: append(ten("KILLED")[:9], "7:2 CONDITIONALS_BOUNDARY LIVED"),
		eq:        eqLived,
		killed:    9, efficacy: 100, coverage: 100,
	}, {
		name:      "two lived of ten fail",
		mutations: append(ten("KILLED")[:8], "7:2 CONDITIONALS_BOUNDARY LIVED", "8:2 CONDITIONALS_BOUNDARY LIVED"),
		killed:    8, lived: 2, efficacy: 80, coverage: 100,
		failures: []string{"efficacy 80.0 % (at least 90), mutant coverage 100.0 % (at least 85)"},
	}, {
		name:      "not covered lowers the coverage, timed out and not viable count neither way",
		mutations: append(ten("KILLED")[:8], "7:2 CONDITIONALS_BOUNDARY NOT COVERED", "8:2 CONDITIONALS_BOUNDARY NOT COVERED", "9:1 INVERT_NEGATIVES TIMED OUT", "9:2 ARITHMETIC_BASE NOT VIABLE"),
		killed:    8, efficacy: 100, coverage: 80,
		failures: []string{"efficacy 100.0 % (at least 90), mutant coverage 80.0 % (at least 85)"},
	}, {
		name:      "an equivalent killed is stale",
		mutations: append(ten("KILLED")[:9], "7:2 CONDITIONALS_BOUNDARY KILLED"),
		eq:        eqLived,
		killed:    9, efficacy: 100, coverage: 100,
		failures: []string{"listed as equivalent but killed: a.go:7:2 CONDITIONALS_BOUNDARY"},
	}, {
		name:      "an equivalent whose line moved is stale",
		mutations: append(ten("KILLED")[:9], "8:2 CONDITIONALS_BOUNDARY LIVED"),
		eq:        eqLived,
		killed:    9, lived: 1, efficacy: 90, coverage: 100,
		failures: []string{"listed as equivalent, no such mutant: a.go:7:2 CONDITIONALS_BOUNDARY"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v := judge("ipam", gremlinsReport(t, "a.go", tc.mutations...), tc.eq, 90, 85)
			if v.killed != tc.killed || v.lived != tc.lived || math.Abs(v.efficacy-tc.efficacy) > 1e-9 || math.Abs(v.coverage-tc.coverage) > 1e-9 ||
				!slices.Equal(v.failures, tc.failures) {
				t.Fatalf("killed %d lived %d efficacy %v coverage %v failures %q\nwant killed %d lived %d efficacy %v coverage %v failures %q",
					v.killed, v.lived, v.efficacy, v.coverage, v.failures, tc.killed, tc.lived, tc.efficacy, tc.coverage, tc.failures)
			}
		})
	}
}
