// Command mutate runs go-gremlins on the packages named, one at a time,
// subtracts the mutants listed as equivalent (equivalent.txt), prints each
// package's figures and fails when a package's efficacy or mutant coverage
// is below its threshold. `make mutate` runs it (mk/mutate.mk).
//
//	go run ./test/mutate -gremlins _output/tools/gremlins ./ipam ./checkpointd/state
//	go run ./test/mutate -base main ...   # only the packages changed since main
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.gremlins, "gremlins", "gremlins", "the gremlins binary")
	flag.StringVar(&o.equivalent, "equivalent", "test/mutate/equivalent.txt", "the equivalent mutants, one a line")
	flag.StringVar(&o.out, "out", "_output/mutate", "where each package's gremlins report and log go")
	flag.StringVar(&o.base, "base", "", "a git revision: run only the packages whose files changed since its merge base with HEAD (the working tree included)")
	flag.Float64Var(&o.efficacy, "efficacy", 90, "the lowest efficacy (%) a package may have")
	flag.Float64Var(&o.coverage, "coverage", 85, "the lowest mutant coverage (%) a package may have")
	flag.IntVar(&o.workers, "workers", 1, "gremlins' workers")
	flag.IntVar(&o.timeoutCoefficient, "timeout-coefficient", 5, "a mutant's tests may take this many times the package's coverage run")
	flag.Func("skip", "files not to mutate, from the repository's top (separated by spaces or commas; repeatable)", func(v string) error {
		for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			o.skip = append(o.skip, path.Clean(f))
		}
		return nil
	})
	flag.Parse()
	o.packages = flag.Args()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	gremlins, equivalent, out, base string
	efficacy, coverage              float64
	workers, timeoutCoefficient     int
	packages, skip                  []string
}

// run checks every package, all of them even after one fails, and
// returns an error naming those that fail.
func run(o options) error {
	if len(o.packages) == 0 {
		return fmt.Errorf("no package named")
	}
	eq, err := readEquivalents(o.equivalent)
	if err != nil {
		return err
	}
	pkgs := cleanPackages(o.packages)
	if o.base != "" {
		changed, err := changedFiles(o.base)
		if err != nil {
			return err
		}
		pkgs = touched(pkgs, changed)
		fmt.Printf("mutate: packages changed since %s: %s\n", o.base, orNone(pkgs))
	}
	if len(pkgs) == 0 {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	src, cleanup, err := sourceCopy()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var figs []figures
	var failed []string
	for _, pkg := range pkgs {
		fmt.Printf("mutate: %s\n", pkg)
		start := time.Now()
		rep, err := unleash(ctx, o, src, pkg)
		if err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
		ran, killed, err := recheck(ctx, src, pkg, rep, o.timeoutCoefficient)
		if err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
		if ran > 0 {
			fmt.Printf("  %d mutants where the coverage profile has no block (case clauses, constants), which gremlins counts as not covered, run here: %d killed\n", ran, killed)
		}
		v := judge(pkg, rep, eq[pkg], o.efficacy, o.coverage)
		v.elapsed = time.Since(start)
		figs = append(figs, v.figures)
		for _, s := range append(v.survivors, v.failures...) {
			fmt.Printf("  %s\n", s)
		}
		if len(v.failures) > 0 {
			failed = append(failed, pkg)
		}
	}
	printTable(os.Stdout, figs)
	if len(failed) > 0 {
		return fmt.Errorf("%s: below efficacy %.0f %% or mutant coverage %.0f %%, or a stale line in %s; "+
			"each mutant that lives wants a test that kills it, or a line in that file saying why it is equivalent",
			strings.Join(failed, " "), o.efficacy, o.coverage, o.equivalent)
	}
	return nil
}

// cleanPackages turns "./ipam/" and "ipam" into "ipam", the form of
// equivalent.txt and of git's paths.
func cleanPackages(args []string) []string {
	var out []string
	for _, a := range args {
		out = append(out, path.Clean(strings.TrimPrefix(filepath.ToSlash(a), "./")))
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
