package daemon

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/stickyip/stickyip/checkpointd/loop"
)

// dataDirRemoved reports whether dir, as this process sees it, is a
// directory that was removed: what a container sees of a hostPath
// directory removed on the host (its bind mount keeps the removed
// directory, in which nothing can be created again). On the host itself a
// removed directory is simply missing, and the next write makes it anew.
func dataDirRemoved(dir string) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// watchDataDir returns an error once the IPAM data directory is a removed
// one (dataDirRemoved), checking every interval, or nil when ctx is done.
// checkpointd then exits: the kubelet starts its container again with the
// host's directory mounted anew (DirectoryOrCreate), and the store is
// rebuilt there. Staying would leave the node without a store for good:
// no rebuild can write into a removed directory.
func watchDataDir(ctx context.Context, dir string, interval time.Duration) error {
	return loop.Every(ctx, interval, nil, func() error {
		if dataDirRemoved(dir) {
			return fmt.Errorf("the IPAM data directory %s was removed on the host while mounted here: exiting, so that it is mounted again and the store rebuilt there", dir)
		}
		return nil
	})
}
