package admin

import (
	"fmt"
	"maps"
	"slices"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// CheckResult is one store of "check --json" (an array, one per store).
type CheckResult struct {
	Path     string   `json:"path"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
	Error    string   `json:"error,omitempty"`
	Hint     string   `json:"hint,omitempty"`
}

// check verifies every store: the database and its invariants, and, with
// each network's config, that no record sits on an address no pod may hold.
// It exits 2 when a store cannot be read, else 1 when one has problems.
func (t *tool) check(args []string) int {
	fs := t.flags("check")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	stores, err := t.stores()
	if err != nil {
		fmt.Fprintln(t.stderr, "stickyip check:", err)
		return 2
	}
	code := 0
	results := []CheckResult{}
	for _, s := range stores {
		st := s.store()
		problems, err := st.Check()
		if err == nil {
			problems = append(problems, t.checkRanges(s)...)
		}
		r := CheckResult{Path: st.Path(), OK: err == nil && len(problems) == 0, Problems: problems}
		if r.Problems == nil {
			r.Problems = []string{}
		}
		switch {
		case err != nil:
			r.Error, r.Hint = err.Error(), hintFor(err, s.dir)
			code = 2
		case len(problems) > 0 && code == 0:
			code = 1
		}
		results = append(results, r)
	}
	if *asJSON {
		_ = t.printJSON(results)
		return code
	}
	for _, r := range results {
		switch {
		case r.Error != "":
			fmt.Fprintf(t.stdout, "%s: cannot be read: %s\n%s\n", r.Path, r.Error, r.Hint)
		case r.OK:
			fmt.Fprintf(t.stdout, "%s: ok\n", r.Path)
		default:
			fmt.Fprintf(t.stdout, "%s: %d problems:\n", r.Path, len(r.Problems))
			for _, p := range r.Problems {
				fmt.Fprintln(t.stdout, "  "+p)
			}
		}
	}
	return code
}

// checkRanges reports the records of store s's networks that sit on an
// address no pod may hold (a range's gateway, network or broadcast
// address), reading the ranges from the CNI configs as status does.
// Networks without a config for this store are not checked (the store does
// not keep ranges); configs that do not parse are named on stderr.
func (t *tool) checkRanges(s storeDir) []string {
	confs, skipped, err := ipam.StickyipNetworks(t.confDir)
	if err != nil {
		fmt.Fprintf(t.stderr, "stickyip check: ranges not checked: %v\n", err)
		return nil
	}
	for _, p := range skipped {
		fmt.Fprintln(t.stderr, "stickyip check: skipped:", p)
	}
	var problems []string
	for _, n := range slices.Sorted(maps.Keys(confs)) {
		c := confs[n]
		if !sameDir(c.DataDir, s.dir) {
			continue
		}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		var found []string
		err := s.store().View(n, func(tx reservation.Txn) (err error) {
			found, err = e.UnassignableRecords(tx)
			return err
		})
		if err != nil {
			found = []string{err.Error()}
		}
		for _, f := range found {
			problems = append(problems, fmt.Sprintf("network %s (%s): %s", n, c.File, f))
		}
	}
	return problems
}
