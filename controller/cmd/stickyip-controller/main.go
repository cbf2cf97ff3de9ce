// Command stickyip-controller alone writes the placement index: it checks
// each claim of the nodes' records (NodeRecord) against the pod, writes
// each verdict into the record's status, builds the namespaces' index
// shards (ConfigMaps) that the placement hint reads, forgets removed
// Nodes, and decides for the nodes how StatefulSet pods' reservations
// follow their StatefulSets. It runs as a Deployment of two replicas, one
// of which holds the Lease and writes. main only wires the flags to
// manager.Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/stickyip/stickyip/controller/manager"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, err := config(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stickyip-controller:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := manager.Run(ctx, cfg, log); err != nil {
		log.Error("stickyip-controller stops", "err", err)
		return 1
	}
	return 0
}

// config resolves the flags into the controller's configuration.
func config(args []string) (manager.Config, error) {
	cfg := manager.Defaults()
	fs := flag.NewFlagSet("stickyip-controller", flag.ContinueOnError)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig file (empty: the pod's in-cluster configuration)")
	fs.BoolVar(&cfg.LeaderElect, "leader-elect", cfg.LeaderElect, "write only while holding the Lease (false: this replica writes alone)")
	fs.StringVar(&cfg.LeaderElectionNamespace, "leader-election-namespace", cfg.LeaderElectionNamespace, "namespace of the Lease")
	fs.StringVar(&cfg.LeaseName, "lease-name", cfg.LeaseName, "name of the Lease")
	fs.StringVar(&cfg.ListenAddress, "listen-address", cfg.ListenAddress, "address of /healthz, /readyz and /metrics")
	fs.DurationVar(&cfg.TombstoneTTL, "tombstone-ttl", cfg.TombstoneTTL, "how long a deleted pod's facts are kept to check a late claim")
	fs.BoolVar(&cfg.ImportFormerIndex, "import-former-index", cfg.ImportFormerIndex,
		"accept a gone pod's entry on the node's own line in the former ConfigMap shards (stickyip-index-0 … -7): only during an upgrade from them, while their policy is installed")
	qps := fs.Float64("qps", float64(cfg.QPS), "queries per second of the controller's API client")
	fs.IntVar(&cfg.Burst, "burst", cfg.Burst, "burst of the controller's API client")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.QPS = float32(*qps)
	return cfg, nil
}
