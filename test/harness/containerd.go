package harness

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ContainerdConfig describes a private containerd instance.
type ContainerdConfig struct {
	// Node is the network namespace containerd runs in; the CNI chain it
	// calls, and so the bridge and its routes, live there. Required.
	Node *Netns
	// MountNS, when set, is the node's own mount namespace containerd runs
	// in (shared with the node's kubelet, see NewMountNS); the mounts it
	// makes under State (pod netns, container rootfs) exist only there.
	// Default: the host's mount namespace.
	MountNS *MountNS
	// CNIBinDir and CNIConfDir are the CRI plugin's CNI bin dir and conf_dir.
	// Required.
	CNIBinDir  string
	CNIConfDir string
	// Dir holds root/, state/, the socket and the log. Default: a fresh
	// short temporary directory removed at cleanup.
	Dir string
	// SandboxImage is the CRI sandbox image (pinned_images.sandbox on 2.x,
	// sandbox_image on 1.6). Default PauseImage, which the harness builds and
	// imports; any other image must be imported by the caller.
	SandboxImage string
	// NetworkLater: the CNI config dir starts empty and a pod installs the
	// config (kube-flannel's install-cni): the start waits for RuntimeReady
	// only, not NetworkReady.
	NetworkLater bool
	// ExtraTOML is appended to the generated config (e.g. more plugin keys).
	// Its keys must suit the config version of the running containerd
	// (Containerd.Major): 4 for 2.x, 2 for 1.6.
	ExtraTOML string
}

// Containerd is a running private containerd in the node network namespace.
// It shares the host's mount namespace, as on a real node: its pod netns
// bind mounts, container rootfs and shm mounts (all under State) are visible
// to the operator tool and to other daemons.
type Containerd struct {
	cfg ContainerdConfig
	// Address is the gRPC socket (CRI and containerd API).
	Address string
	// Root and State are containerd's root (persistent) and state (a tmpfs
	// /run on a real node) directories.
	Root, State string
	// LogPath receives containerd's stdout and stderr.
	LogPath string
	// Bin is the directory of the containerd, shim and ctr binaries run
	// (ContainerdBinDir); Version is what `containerd --version` reports
	// ("2.3.7+unknown", "1.6.20~ds1") and Major its major version.
	Bin     string
	Version string
	Major   int

	// shimSockets is the directory the shims listen in: under State on 2.x
	// (socket_dir), containerd's default /run/containerd/s on 1.6.
	shimSockets string
	daemon
}

// StartContainerd writes a config, starts containerd, waits until CRI reports
// the runtime and the network ready and, with the default sandbox image, builds
// and imports the pause image. Cleanup removes every pod sandbox through CRI
// (so CNI DEL runs), stops containerd, kills anything it left, by PID, and
// removes the shim sockets and libcni result cache entries of its sandboxes.
func StartContainerd(t testing.TB, cfg ContainerdConfig) *Containerd {
	t.Helper()
	if cfg.Node == nil || cfg.CNIBinDir == "" || cfg.CNIConfDir == "" {
		t.Fatal("harness: ContainerdConfig needs Node, CNIBinDir and CNIConfDir")
	}
	if cfg.Dir == "" {
		cfg.Dir = ShortTempDir(t)
	}
	importPause := cfg.SandboxImage == ""
	if importPause {
		cfg.SandboxImage = PauseImage
	}
	version, major, err := ContainerdVersion()
	if err != nil {
		t.Fatal(err)
	}
	c := &Containerd{
		cfg:     cfg,
		Address: filepath.Join(cfg.Dir, "containerd.sock"),
		Root:    filepath.Join(cfg.Dir, "root"),
		State:   filepath.Join(cfg.Dir, "state"),
		LogPath: filepath.Join(cfg.Dir, "containerd.log"),
		Bin:     ContainerdBinDir(),
		Version: version,
		Major:   major,
	}
	c.shimSockets = defaultShimSocketDir
	if major >= 2 && len(filepath.Join(c.State, "s")) <= maxShimSocketDir {
		c.shimSockets = filepath.Join(c.State, "s")
	}
	c.networkLater = cfg.NetworkLater
	t.Cleanup(func() { c.shutdown(t) })
	c.start(t)
	t.Logf("containerd %s (%s) ready at %s", c.Version, c.Bin, c.Address)
	if importPause {
		tarball := BuildPauseImage(t, cfg.Dir, PauseImage)
		args := []string{"images", "import", "--platform", "linux/" + runtime.GOARCH}
		if c.Major >= 2 {
			// What the CRI plugin sets on the pinned_images it pulls itself,
			// so that the kubelet's image GC never removes the sandbox image
			// (ctr import does not know about pinned_images).
			args = append(args, "--label", pinnedImageLabel)
		}
		if out, err := c.Ctr(append(args, tarball)...); err != nil {
			t.Fatalf("import pause image: %v\n%s", err, out)
		}
	}
	return c
}

// pinnedImageLabel marks an image pinned for containerd 2.x's CRI plugin
// (internal/cri/labels: io.cri-containerd.pinned=pinned); CRI ImageStatus
// then reports Pinned and the kubelet's image GC leaves it alone.
const pinnedImageLabel = "io.cri-containerd.pinned=pinned"

// defaultShimSocketDir is where containerd's shims listen unless told
// otherwise: /run/containerd/s/<sha256(address/namespace/id)>, shared by
// every containerd on the machine.
const defaultShimSocketDir = "/run/containerd/s"

// maxShimSocketDir is the longest socket_dir containerd 2.x accepts (a unix
// socket path holds 107 bytes; the name is 64 hex digits).
const maxShimSocketDir = 38

func (c *Containerd) start(t testing.TB) {
	t.Helper()
	cfgPath := filepath.Join(c.cfg.Dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(c.config()), 0o644); err != nil {
		t.Fatal(err)
	}
	// containerd finds its shim on PATH.
	c.startDaemon(t, c.cfg.Node.Path, c.cfg.MountNS, c.LogPath, c.Address,
		[]string{"PATH=" + c.Bin + string(os.PathListSeparator) + os.Getenv("PATH")},
		filepath.Join(c.Bin, "containerd"), "--config", cfgPath)
}

// Ctr runs `ctr` (the one of the same release) against this instance in the
// k8s.io namespace.
func (c *Containerd) Ctr(args ...string) (string, error) {
	return Run(nil, filepath.Join(c.Bin, "ctr"), append([]string{"--address", c.Address, "--namespace", "k8s.io"}, args...)...)
}

// CRI dials the instance's CRI endpoint; the connection is closed at cleanup.
func (c *Containerd) CRI(t testing.TB) *CRIClient {
	t.Helper()
	cri, err := DialCRI(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	return cri
}

// LogTail returns the last n lines of containerd's log, for failure messages.
func (c *Containerd) LogTail(n int) string { return tailFile(c.LogPath, n) }

// Crash simulates a node losing power: containerd, its shims and every
// sandbox and container process are SIGKILLed, no CNI DEL runs, and the state
// directory (tmpfs on a real node) is unmounted and wiped, which removes the
// pod network namespaces.
// Root (the metadata and images) survives. Restart starts it again.
func (c *Containerd) Crash(t testing.TB) {
	t.Helper()
	if err := c.killAll(); err != nil {
		t.Fatal(err)
	}
	// In the node's own mount namespace the state mounts exist only there.
	if m := c.cfg.MountNS; m != nil {
		if err := m.UnmountUnder(c.State); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeUnder(c.State); err != nil {
		t.Fatal(err)
	}
}

// Stop stops containerd as `systemctl stop containerd` does (SIGTERM, the
// unit's KillMode=process): the shims, and with them the pods' sandboxes
// and containers, keep running, and so does the state directory. Restart
// starts it again; it finds them.
func (c *Containerd) Stop(t testing.TB) {
	t.Helper()
	if !c.terminate(30 * time.Second) {
		t.Fatal("harness: containerd did not exit within 30 s of SIGTERM")
	}
}

// Restart starts containerd again on the same directories (after Crash or Stop).
func (c *Containerd) Restart(t testing.TB) {
	t.Helper()
	if c.Running() {
		t.Fatal("harness: Restart while containerd runs")
	}
	c.start(t)
}

// shutdown removes all sandboxes through CRI (running CNI DEL), stops
// containerd and kills whatever is left. Errors are logged, not fatal: it runs
// at cleanup.
func (c *Containerd) shutdown(t testing.TB) {
	if c.Running() {
		removeAllPods(t, c.Address)
		c.terminate(10 * time.Second)
	}
	if err := c.killAll(); err != nil {
		t.Logf("cleanup: %v", err)
	}
	// Sandboxes that never got their DEL (after Crash, or a failed stop)
	// leave libcni's cached result behind, outside the instance's dirs.
	forgetCNIResults(c.sandboxIDs())
	if err := removeUnder(c.cfg.Dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// sandboxIDs lists the pod sandboxes the instance has on disk: the CRI
// plugin keeps a directory per sandbox under its root (1.6 and 2.x alike).
func (c *Containerd) sandboxIDs() []string {
	entries, _ := os.ReadDir(filepath.Join(c.Root, "io.containerd.grpc.v1.cri", "sandboxes"))
	var ids []string
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// forgetCNIResults removes libcni's cached results
// (<cache>/results/<network>-<containerID>-<ifname>) of the given container
// IDs. libcni has no per-runtime cache dir in containerd's CRI config, so the
// cache is the machine's /var/lib/cni.
func forgetCNIResults(ids []string) {
	for _, id := range ids {
		if id == "" || strings.ContainsAny(id, "/*?[") {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(libcniCacheDir, "results", "*-"+id+"-*"))
		for _, f := range files {
			os.Remove(f)
		}
	}
}

// killAll SIGKILLs containerd, its shims (found by the -address argument
// naming this instance's socket) and all their descendants (runc, pause and
// container processes), and waits for them to be gone.
func (c *Containerd) killAll() error {
	if c.cmd == nil {
		return nil
	}
	pids := c.processTree()
	var sockets []string
	for _, pid := range pids {
		if s := c.shimSocket(pid); s != "" {
			sockets = append(sockets, s)
		}
	}
	cgroups := foreignCgroups(pids)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// A killed shim leaves its socket behind, and runc the cgroups of the
	// killed sandboxes (a tmpfs and a fresh cgroupfs on a rebooted node).
	defer func() {
		for _, s := range sockets {
			if fi, err := os.Lstat(s); err == nil && fi.Mode()&os.ModeSocket != 0 {
				os.Remove(s)
			}
		}
		for i := len(cgroups) - 1; i >= 0; i-- {
			os.Remove(cgroups[i]) // rmdir; fails harmlessly while still in use
		}
	}()
	if c.done != nil {
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("containerd pid %d did not exit after SIGKILL", c.cmd.Process.Pid)
		}
	}
	return waitGone(pids)
}

// processTree lists containerd (while it runs), its shims and all their
// descendants.
func (c *Containerd) processTree() []int {
	var roots []int
	if c.Running() {
		roots = append(roots, c.cmd.Process.Pid)
	}
	return processTree(roots, c.isShim)
}

// isShim reports whether pid is a shim of this instance: its command line
// has "-address <our socket>".
func (c *Containerd) isShim(pid int) bool {
	return shimArgs(pid)["-address"] == c.Address
}

// shimSocket returns the socket a shim of this instance listens on, which
// containerd (1.6 and 2.x, pkg/shim CreateSocketAddress) derives from its
// address, the namespace and the shim's ID (2.x: the sandbox ID, one shim per
// pod): <socket dir>/<sha256(address/namespace/id)>. "" for other processes.
func (c *Containerd) shimSocket(pid int) string {
	args := shimArgs(pid)
	if args["-address"] != c.Address || args["-namespace"] == "" || args["-id"] == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(filepath.Join(c.Address, args["-namespace"], args["-id"])))
	return fmt.Sprintf("%s/%x", c.shimSockets, sum)
}
