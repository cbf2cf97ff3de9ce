package install

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/contract"
)

// Node is what one node gets.
type Node struct {
	PluginSource string     // the plugin binary to install (in the image: /stickyip)
	CNIBinDir    string     // the node's CNI bin directory
	StaticPodDir string     // the kubelet's staticPodPath
	Pod          *StaticPod // checkpointd's static pod; nil: none, and one installed before is removed (checkpointd runs from the systemd unit)
}

// Install installs the plugin and writes checkpointd's static pod manifest,
// each atomically and only when it differs from what the node has. It
// returns a line per file saying what it did.
func (n Node) Install() ([]string, error) {
	var report []string
	bin, err := os.ReadFile(n.PluginSource)
	if err != nil {
		return nil, fmt.Errorf("plugin binary: %w", err)
	}
	if err := os.MkdirAll(n.CNIBinDir, 0o755); err != nil {
		return nil, err
	}
	dst := filepath.Join(n.CNIBinDir, contract.PluginType)
	changed, err := WriteFile(dst, bin, 0o755)
	if err != nil {
		return nil, err
	}
	report = append(report, line(changed, dst))
	mp := filepath.Join(n.StaticPodDir, ManifestName)
	if n.Pod == nil { // checkpointd runs from the systemd unit: never two of them
		if _, err := os.Lstat(mp); errors.Is(err, os.ErrNotExist) {
			return report, nil // (a read-only directory refuses even a vain unlink)
		}
		if _, err := Remove(mp); err != nil {
			return report, err
		}
		return append(report, "removed "+mp), nil
	}
	manifest, err := n.Pod.Manifest()
	if err != nil {
		return report, err
	}
	if err := os.MkdirAll(n.StaticPodDir, 0o755); err != nil {
		return report, err
	}
	// The kubelet reads every file in the directory, dot files excepted:
	// the temporary file WriteFile renames into place is never half-read.
	changed, err = WriteFile(mp, manifest, 0o600)
	if err != nil {
		return report, err
	}
	return append(report, line(changed, mp)), nil
}

func line(changed bool, path string) string {
	if changed {
		return "installed " + path
	}
	return "unchanged " + path
}

// Uninstall removes what Install and checkpointd put on the node, in the
// order that leaves nothing behind: checkpointd's static pod manifest, then
// (once the kubelet has stopped checkpointd, which removes its copies as it
// stops: its listen address no longer answers, at most wait) everything
// checkpointd wrote (cleanup.Remove with all), then the plugin binary. The
// IPAM store is left in place. It returns the paths it removed.
func (n Node) Uninstall(ctx context.Context, cfg config.Config, wait time.Duration) ([]string, error) {
	var removed []string
	mp := filepath.Join(n.StaticPodDir, ManifestName)
	if ok, err := Remove(mp); err != nil {
		return nil, err
	} else if ok {
		removed = append(removed, mp)
	}
	if cfg.ListenAddress != "" {
		if err := waitClosed(ctx, cfg.ListenAddress, wait); err != nil {
			return removed, fmt.Errorf("checkpointd still answers on %s after its static pod was removed; is it also run by systemd? %w", cfg.ListenAddress, err)
		}
	}
	more, err := Cleanup(cfg, true)
	removed = append(removed, more...)
	if err != nil {
		return removed, err
	}
	bin := filepath.Join(n.CNIBinDir, contract.PluginType)
	if ok, err := Remove(bin); err != nil {
		return removed, err
	} else if ok {
		removed = append(removed, bin)
	}
	return removed, nil
}

// waitClosed waits until nothing accepts connections on addr.
func waitClosed(ctx context.Context, addr string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case <-time.After(time.Second):
		}
	}
}
