package admin

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

func (t *tool) check(args []string) int {
	fs := t.flags("check")
	asJSON := fs.Bool("json", false, "print JSON")
	confDir := fs.String("cni-conf-dir", contract.DefaultCNIConfDir, "CNI network configs to read each network's ranges from")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	st := t.store()
	problems, err := st.Check()
	if err == nil {
		problems = append(problems, t.checkRanges(*confDir)...)
	}
	if *asJSON {
		out := map[string]any{"path": st.Path(), "ok": err == nil && len(problems) == 0, "problems": problems}
		if err != nil {
			out["error"] = err.Error()
			out["hint"] = hintFor(err, t.dataDir)
		}
		_ = t.printJSON(out)
	} else {
		switch {
		case err != nil:
			fmt.Fprintf(t.stdout, "%s: cannot be read: %v\n%s\n", st.Path(), err, hintFor(err, t.dataDir))
		case len(problems) == 0:
			fmt.Fprintf(t.stdout, "%s: ok\n", st.Path())
		default:
			fmt.Fprintf(t.stdout, "%s: %d problems:\n", st.Path(), len(problems))
			for _, p := range problems {
				fmt.Fprintln(t.stdout, "  "+p)
			}
		}
	}
	switch {
	case err != nil:
		return 2
	case len(problems) > 0:
		return 1
	}
	return 0
}

// checkRanges reports the records of this data directory's networks that sit
// on an address no pod may hold (a range's gateway, network or broadcast
// address), reading the ranges from the CNI configs as status does.
// Networks without a config here are not checked (the store does not keep
// ranges); configs that do not parse are named on stderr.
func (t *tool) checkRanges(confDir string) []string {
	confs, skipped, err := ipam.StickyipNetworks(confDir)
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
		if filepath.Clean(c.DataDir) != filepath.Clean(t.dataDir) {
			continue
		}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		var found []string
		err := t.store().View(n, func(tx reservation.Txn) (err error) {
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
