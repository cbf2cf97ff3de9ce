package admin

import (
	"fmt"
	"log/slog"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// gc releases the allocations whose sandbox is gone and drops what expired,
// in every network of the store, each by the rules of its own config (found
// as `stickyip status` finds it). A network without one is skipped, named on
// stderr: releasing its addresses with other rules (no reuse delay, no
// host-local import) could hand an address out too early.
func (t *tool) gc(args []string) error {
	fs := t.flags("gc")
	confDir := fs.String("cni-conf-dir", contract.DefaultCNIConfDir, "CNI network configs to read each network's rules from")
	network := fs.String("network", "", "only this network")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	nets, err := t.networks(*network)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, n := range nets {
		e, err := ipam.NetworkEngine(*confDir, n, t.dataDir, ipam.HostEnv(log))
		if err != nil {
			if *network != "" {
				return err
			}
			fmt.Fprintf(t.stderr, "stickyip gc: %s: skipped, nothing changed: %v\n", n, err)
			continue
		}
		var dead, expired int
		err = t.store().Update(n, func(tx reservation.Txn) (err error) {
			expired, dead, err = e.Sweep(tx)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(t.stdout, "%s: released %d allocations whose sandbox is gone, dropped %d expired reservations and cooling periods\n", n, dead, expired)
	}
	return nil
}
