package admin

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

func (t *tool) release(args []string) error {
	fs := t.flags("release")
	network := fs.String("network", "", "only this network")
	ifname := fs.String("ifname", "", "only this interface")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want exactly one NAMESPACE/NAME")
	}
	ns, name, ok := strings.Cut(pos[0], "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("%q is not NAMESPACE/NAME", pos[0])
	}
	stores, err := t.stores()
	if err != nil {
		return err
	}
	found := 0
	for _, s := range stores {
		nets, err := s.networks(*network, len(stores) == 1)
		if err != nil {
			return err
		}
		for _, n := range nets {
			label := s.label(n, len(stores) > 1)
			err := s.store().Update(n, func(tx reservation.Txn) error {
				done, err := ipam.ReleasePod(tx, ns, name, *ifname, slog.New(slog.DiscardHandler))
				if err != nil {
					return err
				}
				for _, r := range done {
					found++
					if r.Dropped {
						fmt.Fprintf(t.stdout, "%s: released %s (reserved for %s/%s until %s)\n", label, r.IP, ns, name, r.ExpiresAt.Format(time.RFC3339))
					} else {
						fmt.Fprintf(t.stdout, "%s: %s is in use by container %s; it will be freed, not reserved, when that sandbox is deleted\n", label, r.IP, r.ContainerID)
					}
				}
				if len(done) == 0 {
					return reservation.ErrNoChange
				}
				return nil
			})
			if err != nil {
				return inStore(s.dir, err)
			}
		}
	}
	if found == 0 {
		// Exit 1, nothing to do: a misspelt name is not a silent success.
		fmt.Fprintf(t.stdout, "nothing recorded for %s/%s\n", ns, name)
		return errNothing
	}
	return nil
}
