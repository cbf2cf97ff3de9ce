package admin

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

func (t *tool) importCmd(args []string) error {
	fs := t.flags("import")
	network := fs.String("network", "", "network name (required)")
	from := fs.String("from", "", "host-local data directory of the network (default "+contract.DefaultHostLocalDataDir+"/NETWORK)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("--network is required")
	}
	dir := *from
	if dir == "" {
		dir = filepath.Join(contract.DefaultHostLocalDataDir, *network)
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := ipam.HostEnv(log)
	var n int
	err := t.store().Update(*network, func(tx reservation.Txn) (err error) {
		n, err = ipam.ImportHostLocal(tx, dir, nil, env.BootID, time.Now(), log)
		if err != nil {
			return err
		}
		return ipam.MarkImported(tx, time.Now(), n)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(t.stdout, "%s: imported %d allocations from %s\n", *network, n, dir)
	return nil
}
