package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/reservation"
)

// RebuildStore rebuilds the IPAM store once, as the daemon does when it
// finds it damaged or lost: `checkpointd rebuild-store`, the operator's
// command when the daemon runs with --rebuild-store=false. Its sources are
// the node's own (the runtime, its CNI result cache, the sandboxes'
// network namespaces, the checkpoints); it reads no placement index and
// posts no Event (the log says everything). It returns whether the store
// was rebuilt; a usable store is left as it is.
func RebuildStore(ctx context.Context, cfg config.Config) (bool, error) {
	if cfg.DataDir == "" {
		return false, errors.New("--data-dir is empty: no IPAM store")
	}
	runtime, err := cri.Dial(cfg.CRIEndpoint, cfg.Timeout)
	if err != nil {
		return false, err
	}
	defer runtime.Close()
	store := ipamstore.New(cfg.DataDir, cfg.Timeout, cfg.Log.With("component", "ipam")).WithCNIConfDir(cfg.CNIConfDir).WithCNIResultsDir(cfg.CNIResultsDir)
	b := rebuild.New(rebuild.Config{
		Enabled: true, Store: store, Runtime: runtime, ResultsDir: cfg.CNIResultsDir,
		Checkpoints: checkpoint.Open(cfg.CheckpointDir).Records, Log: cfg.Log,
	})
	b.Suspect(reservation.ErrCorrupt) // check every record, not only what STATUS reads
	rebuilt := b.Pass(ctx)
	if !rebuilt {
		if err := store.Damage(); err != nil {
			return false, fmt.Errorf("the store was not rebuilt (the log says why): %w", err)
		}
	}
	return rebuilt, nil
}
