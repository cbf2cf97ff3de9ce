package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// mutant names one mutation as gremlins reports it: a file of the package,
// its position, and the mutator.
type mutant struct {
	file      string
	line, col int
	kind      string
}

func (m mutant) String() string { return fmt.Sprintf("%s:%d:%d %s", m.file, m.line, m.col, m.kind) }

// equivalents are the mutants that change nothing a test could see, by
// package, each with its reason.
type equivalents map[string]map[mutant]string

// readEquivalents reads path: one mutant a line,
//
//	package file:line:col MUTATOR why, in a few words
//
// blank lines and lines starting with # aside.
func readEquivalents(path string) (equivalents, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	eq := equivalents{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pkg, m, why, err := parseEquivalent(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if eq[pkg] == nil {
			eq[pkg] = map[mutant]string{}
		}
		if _, dup := eq[pkg][m]; dup {
			return nil, fmt.Errorf("%s:%d: %s %s listed twice", path, n, pkg, m)
		}
		eq[pkg][m] = why
	}
	return eq, sc.Err()
}

// parseEquivalent parses one line of the equivalents file.
func parseEquivalent(line string) (pkg string, m mutant, why string, err error) {
	fields := strings.Fields(line)
	if len(fields) < 4 {
		return "", m, "", fmt.Errorf("%q: want package file:line:col MUTATOR why", line)
	}
	pos := strings.Split(fields[1], ":")
	if len(pos) != 3 {
		return "", m, "", fmt.Errorf("%q: want file:line:col", fields[1])
	}
	m.file, m.kind = pos[0], fields[2]
	if m.line, err = strconv.Atoi(pos[1]); err == nil {
		m.col, err = strconv.Atoi(pos[2])
	}
	if err != nil || m.line < 1 || m.col < 1 {
		return "", m, "", fmt.Errorf("%q: line and column are positive numbers", fields[1])
	}
	if !mutators[m.kind] {
		return "", m, "", fmt.Errorf("%q is not a gremlins mutator", m.kind)
	}
	return fields[0], m, strings.Join(fields[3:], " "), nil
}

// mutators are the mutator names gremlins reports.
var mutators = map[string]bool{
	"ARITHMETIC_BASE": true, "CONDITIONALS_BOUNDARY": true, "CONDITIONALS_NEGATION": true,
	"INCREMENT_DECREMENT": true, "INVERT_ASSIGNMENTS": true, "INVERT_BITWISE": true,
	"INVERT_BWASSIGN": true, "INVERT_LOGICAL": true, "INVERT_LOOPCTRL": true,
	"INVERT_NEGATIVES": true, "REMOVE_SELF_ASSIGNMENTS": true,
}
