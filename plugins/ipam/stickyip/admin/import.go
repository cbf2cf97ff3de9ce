package admin

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/datadir"
	"github.com/stickyip/stickyip/reservation"
)

// importCmd imports host-local's allocations of a network into its store:
// the store and host-local's directory its config names (ipam.dataDir,
// ipam.hostLocalDataDir), unless --data-dir or --from say otherwise.
func (t *tool) importCmd(args []string) error {
	fs := t.flags("import")
	network := fs.String("network", "", "network name (required)")
	from := fs.String("from", "", "host-local data directory of the network (default: the config's hostLocalDataDir, else "+contract.DefaultHostLocalDataDir+", /NETWORK)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("--network is required")
	}
	dataDir, hostLocal, err := t.importDirs(*network)
	if err != nil {
		return err
	}
	dir := *from
	if dir == "" {
		if hostLocal == "" {
			return fmt.Errorf("network %s: its config turns the host-local import off (ipam.hostLocalDataDir \"\"); give --from", *network)
		}
		dir = filepath.Join(hostLocal, *network)
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := ipam.HostEnv(log)
	var n int
	hl := &ipam.HostLocal{Dir: dir} // listed once, if the store asks for room
	err = datadir.Open(dataDir, 0).Update(*network, func(tx reservation.Txn) (err error) {
		n, err = hl.Import(tx, nil, env.BootID, time.Now(), log)
		if err != nil {
			return err
		}
		return ipam.MarkImported(tx, time.Now(), n)
	})
	if err != nil {
		return inStore(dataDir, err)
	}
	fmt.Fprintf(t.stdout, "%s: imported %d allocations from %s into %s\n", *network, n, dir, dataDir)
	return nil
}

// importDirs returns the store and host-local's directory for network:
// --data-dir when given; else those of its config in --cni-conf-dir; else
// the defaults (stderr says so).
func (t *tool) importDirs(network string) (dataDir, hostLocal string, err error) {
	hostLocal = contract.DefaultHostLocalDataDir
	nets, _, err := ipam.NetworkStores(t.confDir)
	if err != nil {
		return "", "", err
	}
	for _, n := range nets {
		if n.Network == network {
			dataDir, hostLocal = n.DataDir, n.HostLocalDataDir
		}
	}
	switch {
	case t.dataDir.set:
		dataDir = t.dataDir.dir
	case dataDir == "":
		dataDir = defaultDataDir
		fmt.Fprintf(t.stderr, "stickyip import: no network %s uses stickyip in %s; importing into %s, the default data directory\n", network, t.confDir, dataDir)
	}
	return dataDir, hostLocal, nil
}
