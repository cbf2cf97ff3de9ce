package admin

import (
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/datadir"
	"github.com/stickyip/stickyip/reservation"
)

// PoolStatus is one network of "status --json".
type PoolStatus struct {
	Network string `json:"network"`
	DataDir string `json:"dataDir"`
	// ConfigFile is the CNI config the network's ranges come from.
	ConfigFile string            `json:"configFile,omitempty"`
	Sets       []ipam.SetSummary `json:"rangeSets"`
	// Outside counts records in no configured range (the ranges changed).
	Outside int `json:"outside,omitempty"`
	// NodeRanges are the Node's pod CIDRs as checkpointd recorded them
	// (absent without checkpointd): a retired one is no longer the node's.
	NodeRanges *ipam.NodeRanges `json:"nodeRanges,omitempty"`
}

// status prints how full each stickyip network's range sets are. The ranges
// come from the CNI configs (the store does not keep them), the records from
// each network's own data directory; with --data-dir, only the networks
// keeping their records there.
func (t *tool) status(args []string) error {
	fs := t.flags("status")
	network := fs.String("network", "", "only this network")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	confs, problems, err := ipam.StickyipNetworks(t.confDir)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(t.stderr, "stickyip status: skipped:", p)
	}
	if t.dataDir.set { // --data-dir wins: that store's networks only
		maps.DeleteFunc(confs, func(_ string, c ipam.StickyipNetwork) bool { return !sameDir(c.DataDir, t.dataDir.dir) })
	}
	names := slices.Sorted(maps.Keys(confs))
	if *network != "" {
		if _, ok := confs[*network]; !ok {
			return fmt.Errorf("no stickyip network %q in %s", *network, t.confDir)
		}
		names = []string{*network}
	}
	out := []PoolStatus{}
	now := time.Now()
	for _, n := range names {
		c := confs[n]
		st := PoolStatus{Network: n, DataDir: c.DataDir, ConfigFile: c.File}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		err := datadir.Open(c.DataDir, 0).View(n, func(tx reservation.Txn) (err error) {
			if st.Sets, st.Outside, err = e.Summary(tx, now); err != nil {
				return err
			}
			nr, err := ipam.ReadNodeRanges(tx)
			if len(nr.Current) > 0 {
				st.NodeRanges = &nr
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("network %s: %w", n, err)
		}
		out = append(out, st)
	}
	if *asJSON {
		return t.printJSON(out)
	}
	w := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NETWORK\tSET\tRANGES\tSIZE\tALLOCATED\tRESERVED\tCOOLING\tFREE")
	for _, p := range out {
		for _, s := range p.Sets {
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Network, s.RangeSet, s.Ranges, s.Size, s.Allocated, s.Reserved, s.Cooling, s.Free)
		}
		if p.Outside > 0 {
			fmt.Fprintf(w, "%s\t-\toutside the configured ranges\t-\t%d records\t\t\t\n", p.Network, p.Outside)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range out {
		if p.NodeRanges != nil && len(p.NodeRanges.Retired) > 0 {
			fmt.Fprintf(t.stdout, "%s: node %s: no address of %v is handed out, reserved or published\n", p.Network, p.NodeRanges, p.NodeRanges.Retired)
		}
	}
	return nil
}
