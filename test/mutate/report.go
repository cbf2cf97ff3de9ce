package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// report is what gremlins writes with -o (its JSON output): every
// mutation of the package, by file (named relative to the package).
type report struct {
	Files []reportFile `json:"files"`
}

type reportFile struct {
	Name      string           `json:"file_name"`
	Mutations []reportMutation `json:"mutations"`
}

type reportMutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// readReport reads a gremlins JSON report.
func readReport(path string) (*report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// figures are one package's counts, the equivalent mutants taken out.
type figures struct {
	pkg                                string
	mutants, killed, lived, notCovered int
	equivalent, timedOut, notViable    int
	efficacy, coverage                 float64 // percent
	elapsed                            time.Duration
}

// verdict is what judge found in one package.
type verdict struct {
	figures
	survivors []string // the mutants that lived or were not covered
	failures  []string // why the package fails; none: it passes
}

// judge counts rep's mutants for pkg, the listed equivalents (eq) aside.
// The package fails when its efficacy (killed over killed and lived) or
// its mutant coverage (killed and lived over those and the not covered)
// is below its threshold, and for every equivalent listed that no longer
// lives: killed now, or its line moved (the list follows the code). A
// mutant that times out counts neither way, as gremlins counts it; one that
// does not compile is not a mutant.
func judge(pkg string, rep *report, eq map[mutant]string, minEfficacy, minCoverage float64) verdict {
	v := verdict{figures: figures{pkg: pkg}}
	seen := map[mutant]bool{}
	for _, file := range rep.Files {
		for _, m := range file.Mutations {
			id := mutant{file: file.Name, line: m.Line, col: m.Column, kind: m.Type}
			if m.Status == "NOT VIABLE" {
				v.notViable++
				continue
			}
			v.mutants++
			if _, ok := eq[id]; ok {
				seen[id] = true
				v.equivalent++
				if m.Status == "KILLED" {
					v.failures = append(v.failures, fmt.Sprintf("listed as equivalent but killed: %s", id))
				}
				continue
			}
			switch m.Status {
			case "KILLED":
				v.killed++
			case "LIVED":
				v.lived++
				v.survivors = append(v.survivors, fmt.Sprintf("LIVED       %s", id))
			case "NOT COVERED":
				v.notCovered++
				v.survivors = append(v.survivors, fmt.Sprintf("NOT COVERED %s", id))
			case "TIMED OUT":
				v.timedOut++
			}
		}
	}
	for id := range eq {
		if !seen[id] {
			v.failures = append(v.failures, fmt.Sprintf("listed as equivalent, no such mutant: %s", id))
		}
	}
	if n := v.killed + v.lived; n > 0 {
		v.efficacy = 100 * float64(v.killed) / float64(n)
		v.coverage = 100 * float64(n) / float64(n+v.notCovered)
	}
	if v.efficacy < minEfficacy || v.coverage < minCoverage {
		v.failures = append(v.failures, fmt.Sprintf("efficacy %.1f %% (at least %.0f), mutant coverage %.1f %% (at least %.0f)",
			v.efficacy, minEfficacy, v.coverage, minCoverage))
	}
	slices.Sort(v.survivors)
	slices.Sort(v.failures)
	return v
}

// printTable writes one line of figures per package.
func printTable(w io.Writer, figs []figures) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "package\tmutants\tkilled\tlived\tnot covered\tequivalent\ttimed out\tefficacy\tcoverage\ttime\t")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f %%\t%.1f %%\t%s\t\n", f.pkg, f.mutants, f.killed, f.lived, f.notCovered,
			f.equivalent, f.timedOut, f.efficacy, f.coverage, f.elapsed.Round(time.Second))
	}
	tw.Flush()
}
