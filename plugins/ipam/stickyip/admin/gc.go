package admin

import (
	"fmt"
	"log/slog"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// gc releases the allocations whose sandbox is gone and drops what expired,
// in every network of every store, each by the rules of its own config
// (found as `stickyip status` finds it). A network without one is skipped,
// named on stderr: releasing its addresses with other rules (no reuse
// delay, no host-local import) could hand an address out too early.
func (t *tool) gc(args []string) error {
	fs := t.flags("gc")
	network := fs.String("network", "", "only this network")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	stores, err := t.stores()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, s := range stores {
		nets, err := s.networks(*network, len(stores) == 1)
		if err != nil {
			return err
		}
		for _, n := range nets {
			label := s.label(n, len(stores) > 1)
			e, err := ipam.NetworkEngine(t.confDir, n, s.dir, ipam.HostEnv(log))
			if err != nil {
				if *network != "" {
					return err
				}
				fmt.Fprintf(t.stderr, "stickyip gc: %s: skipped, nothing changed: %v\n", label, err)
				continue
			}
			var dead, expired int
			err = s.store().Update(n, func(tx reservation.Txn) (err error) {
				expired, dead, err = e.Sweep(tx)
				return err
			})
			if err != nil {
				return inStore(s.dir, err)
			}
			fmt.Fprintf(t.stdout, "%s: released %d allocations whose sandbox is gone, dropped %d expired reservations and cooling periods\n", label, dead, expired)
		}
	}
	return nil
}
