//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// mountRun mounts a tmpfs as the node's /run (runDir): flannel's lease and
// checkpointd's restored files live there, and a power cut empties it, as
// on a real node.
func (n *node) mountRun() {
	t := n.t
	t.Helper()
	if err := os.MkdirAll(n.runDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", n.runDir(), "tmpfs", 0, "mode=0755,size=64m"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", n.runDir(), err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(n.runDir(), syscall.MNT_DETACH) })
}

// clearRun empties the node's /run the way a power cut does.
func (n *node) clearRun() {
	t := n.t
	t.Helper()
	if err := syscall.Unmount(n.runDir(), syscall.MNT_DETACH); err != nil {
		t.Fatalf("unmount %s: %v", n.runDir(), err)
	}
	if err := syscall.Mount("tmpfs", n.runDir(), "tmpfs", 0, "mode=0755,size=64m"); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", n.runDir(), err)
	}
}

// flanneld stands in for flanneld with --kube-subnet-mgr where real flannel
// does not run: the one-node scenarios, whose API server has no
// controller-manager to allocate a podCIDR (the cluster, newFlannelCluster,
// runs flanneld itself from kube-flannel.yml). Once the API server answers, it writes
// the node's lease to the subnet file, as flanneld does at start (a
// temporary file renamed into place), and then does nothing more. While the
// API server is away it writes nothing.
type flanneld struct {
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	wrote    time.Time
	writeErr error
}

// startFlanneld starts the stand-in with the node's current lease (n.subnet).
func (n *node) startFlanneld() {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flanneld{cancel: cancel, done: make(chan struct{})}
	n.flanneld = f
	n.t.Cleanup(f.stop)
	content := fmt.Sprintf("FLANNEL_NETWORK=%s\nFLANNEL_SUBNET=%s\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", podNetwork, n.subnet)
	path := n.subnetFile()
	go func() {
		defer close(f.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := n.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
			rcancel()
			if err == nil {
				err := writeRenamed(path, []byte(content))
				f.mu.Lock()
				f.wrote, f.writeErr = time.Now(), err
				f.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// written reports when the stand-in wrote the lease (zero: not yet).
func (f *flanneld) written() (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wrote, f.writeErr
}

func (f *flanneld) stop() {
	f.cancel()
	<-f.done
}

func writeRenamed(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".flanneld"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
