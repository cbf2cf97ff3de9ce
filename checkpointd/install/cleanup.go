package install

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/stickyip/stickyip/checkpointd/boot"
	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
)

// formerShardsFile is where a checkpointd of the former placement index
// listed the shards it wrote to; a node upgraded from it may still have it.
const formerShardsFile = "placement-shards.json"

// Cleanup takes off the node what checkpointd put there (`checkpointd
// cleanup`, which the systemd unit runs whenever the daemon stops, and
// Node.Uninstall with all): with all false, its
// static copies' manifests (what the systemd unit runs whenever the daemon
// stops, crashes included; the copies' files stay for a copy the kubelet
// keeps running until it reaches the API server, and go with the next
// checkpointd's first pass, a reboot (tmpfs) or --all); with all, also the
// copies' files, every checkpoint, stored secret, absence mark, corrupt
// record, the saved flannel lease, the last API contact, a former
// checkpointd's list of placement shards and the per-boot files. It never
// touches a file it did not write (nor the node's NodeRecord in the API:
// an administrator removes it with kubectl). It returns the paths it
// removed.
func Cleanup(cfg config.Config, all bool) ([]string, error) {
	static, err := cfg.ResolveStaticPodDir()
	if err != nil {
		return nil, err
	}
	cfg.StaticPodDir = static
	if !all {
		return reconcile.StopCopies(cfg.StaticPodDir, cfg.VolumeDir)
	}
	removed, err := reconcile.RemoveCopies(cfg.StaticPodDir, cfg.VolumeDir)
	if err != nil {
		return removed, err
	}
	store := checkpoint.Open(cfg.CheckpointDir)
	more, err := store.Purge(flannel.SavedFileName, boot.ContactFileName, formerShardsFile)
	removed = append(removed, more...)
	if err != nil {
		return removed, err
	}
	for _, name := range []string{boot.FileName, flannel.MarkerFileName} {
		p := filepath.Join(cfg.VolumeDir, name)
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
	}
	_ = os.Remove(cfg.VolumeDir) // only when empty
	return removed, nil
}
