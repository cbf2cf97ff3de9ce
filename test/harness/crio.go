package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CRIOConfig describes a private CRI-O instance.
type CRIOConfig struct {
	// Node is the network namespace CRI-O runs in (the CNI chain runs there).
	// Required.
	Node *Netns
	// CNIBinDir and CNIConfDir are CRI-O's cni_plugin_dir and
	// cni_config_dir. Required.
	CNIBinDir  string
	CNIConfDir string
	// Dir holds the storage root and run root, the socket, the namespaces
	// and the log. Default: a fresh short temporary directory removed at
	// cleanup.
	Dir string
}

// CRIO is a running private CRI-O in the node network namespace, with runc
// and conmon, storage under Dir and the harness's pause image. Like
// containerd here, it shares the host's mount namespace.
type CRIO struct {
	cfg CRIOConfig
	// Address is the CRI socket.
	Address string
	// Root and RunRoot are the container storage root and state directory.
	Root, RunRoot string
	// LogPath receives CRI-O's output.
	LogPath string
	// Version is what `crio --version` reports ("1.34.0").
	Version string

	daemon
}

// crioBinaries are what CRIOBinDir must hold: scripts/install-deps.sh
// builds them from test/integration/criobuild (copyimg is CRI-O's own tool
// to put an image into its storage; pinns, its namespace pinner).
var crioBinaries = []string{"crio", "copyimg", "pinns"}

// CRIOBinDir is where scripts/install-deps.sh puts CRI-O's binaries.
func CRIOBinDir() string { return filepath.Join(OutputDir(), "crio", "bin") }

// RequireCRIO skips the test (fails it in strict mode, Missing) unless
// CRI-O's binaries and conmon (Debian) are installed.
func RequireCRIO(t testing.TB) {
	t.Helper()
	var missing []string
	for _, b := range crioBinaries {
		if _, err := os.Stat(filepath.Join(CRIOBinDir(), b)); err != nil {
			missing = append(missing, filepath.Join(CRIOBinDir(), b))
		}
	}
	if _, err := exec.LookPath("conmon"); err != nil {
		missing = append(missing, "conmon")
	}
	if len(missing) > 0 {
		Missing(t, "missing %s (run scripts/install-deps.sh)", strings.Join(missing, ", "))
	}
}

// StartCRIO imports the pause image into a fresh storage, starts CRI-O and
// waits until CRI reports the runtime and the network ready. Cleanup removes
// every pod sandbox through CRI (so CNI DEL runs), stops CRI-O, kills by PID
// what it left (conmon and the pods' processes), unmounts what it mounted
// and removes the libcni result cache entries of its sandboxes.
func StartCRIO(t testing.TB, cfg CRIOConfig) *CRIO {
	t.Helper()
	RequireCRIO(t)
	if cfg.Node == nil || cfg.CNIBinDir == "" || cfg.CNIConfDir == "" {
		t.Fatal("harness: CRIOConfig needs Node, CNIBinDir and CNIConfDir")
	}
	if cfg.Dir == "" {
		cfg.Dir = ShortTempDir(t)
	}
	c := &CRIO{
		cfg:     cfg,
		Address: filepath.Join(cfg.Dir, "crio.sock"),
		Root:    filepath.Join(cfg.Dir, "root"),
		RunRoot: filepath.Join(cfg.Dir, "run"),
		LogPath: filepath.Join(cfg.Dir, "crio.log"),
	}
	out, err := Run(nil, filepath.Join(CRIOBinDir(), "crio"), "--version")
	if err != nil {
		t.Fatal(err)
	}
	c.Version = strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "crio version ")
	// Nothing is pulled: the harness's pause image goes straight into the
	// storage, accepted by a policy of this instance's own.
	if err := os.WriteFile(c.path("policy.json"), []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tarball := BuildPauseImage(t, cfg.Dir, PauseImage)
	if _, err := Run(nil, filepath.Join(CRIOBinDir(), "copyimg"), c.storageFlags(
		"--signature-policy", c.path("policy.json"),
		"--import-from", "oci-archive:"+tarball, "--image-name", PauseImage)...); err != nil {
		t.Fatalf("import pause image into CRI-O's storage: %v", err)
	}
	t.Cleanup(func() { c.shutdown(t) })
	c.start(t)
	t.Logf("CRI-O %s ready at %s", c.Version, c.Address)
	return c
}

func (c *CRIO) path(name string) string { return filepath.Join(c.cfg.Dir, name) }

// storageFlags are the container storage flags crio and copyimg share,
// followed by more.
func (c *CRIO) storageFlags(more ...string) []string {
	return append([]string{"--root", c.Root, "--runroot", c.RunRoot, "--storage-driver", "overlay"}, more...)
}

// args are crio's flags: every path and socket of the machine's own CRI-O
// moved under Dir, NRI off, cgroupfs, runc from Debian.
func (c *CRIO) args() []string {
	conmon, _ := exec.LookPath("conmon")
	runc, err := exec.LookPath("runc")
	if err != nil {
		runc = "runc"
	}
	return c.storageFlags(
		"--config", "",
		"--listen", c.Address,
		"--conmon", conmon,
		"--pinns-path", filepath.Join(CRIOBinDir(), "pinns"),
		"--cgroup-manager", "cgroupfs", "--conmon-cgroup", "pod",
		"--cni-config-dir", c.cfg.CNIConfDir, "--cni-plugin-dir", c.cfg.CNIBinDir,
		"--default-runtime", "runc", "--runtimes", "runc:"+runc+":"+c.path("runc"),
		"--pause-image", PauseImage, "--pause-command", "/pause", "--pinned-images", PauseImage,
		"--signature-policy", c.path("policy.json"), "--signature-policy-dir", c.path("policies"),
		"--namespaces-dir", c.path("ns"),
		"--version-file", c.path("version"), "--version-file-persist", c.path("version-persist"),
		"--clean-shutdown-file", c.path("clean.shutdown"),
		"--log-dir", c.path("logs"), "--container-exits-dir", c.path("exits"),
		"--container-attach-socket-dir", c.path("attach"),
		"--enable-nri=false", "--stream-address", "127.0.0.1", "--stream-port", "0",
		"--log-level", "info",
	)
}

func (c *CRIO) start(t testing.TB) {
	t.Helper()
	// CRI-O gives the pod's infra process oom_score_adj -998, which this
	// kind of machine refuses (runc: "can't get final child's PID from
	// pipe"; containerd has restrict_oom_score_adj for it). CRI-O's rootless
	// mode leaves oom_score_adj out of the sandbox spec; it also drops the
	// infra container's device rules and CPU shares (no cgroup v2
	// delegation here), none of which the network depends on.
	c.startDaemon(t, c.cfg.Node.Path, nil, c.LogPath, c.Address, []string{"_CRIO_ROOTLESS=1"},
		append([]string{filepath.Join(CRIOBinDir(), "crio")}, c.args()...)...)
}

// CRI dials the instance's CRI endpoint; the connection is closed at cleanup.
func (c *CRIO) CRI(t testing.TB) *CRIClient {
	t.Helper()
	cri, err := DialCRI(c.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	return cri
}

// Stop stops CRI-O (SIGTERM) and waits for it; the pods keep running, as
// when the service restarts. Start starts it again.
func (c *CRIO) Stop(t testing.TB) {
	t.Helper()
	if !c.terminate(30 * time.Second) {
		t.Fatal("crio did not stop within 30s of SIGTERM")
	}
}

// Start starts CRI-O again on the same directories (after Stop).
func (c *CRIO) Start(t testing.TB) {
	t.Helper()
	if c.Running() {
		t.Fatal("harness: Start while CRI-O runs")
	}
	c.start(t)
}

// shutdown removes all sandboxes through CRI, stops CRI-O and kills what is
// left. Errors are logged: it runs at cleanup.
func (c *CRIO) shutdown(t testing.TB) {
	var ids []string
	if c.Running() {
		ids = removeAllPods(t, c.Address)
		c.terminate(10 * time.Second)
	}
	// conmon daemonizes away from crio: it and the pods' processes are found
	// by the instance's directory on their command lines.
	var roots []int
	if c.Running() {
		roots = append(roots, c.cmd.Process.Pid)
	}
	pids := processTree(roots, func(pid int) bool { return cmdlineMentions(pid, c.cfg.Dir+"/") })
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := waitGone(pids); err != nil {
		t.Logf("cleanup: %v", err)
	}
	forgetCNIResults(ids)
	if err := removeUnder(c.cfg.Dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// cmdlineMentions reports whether a process's command line contains s.
func cmdlineMentions(pid int, s string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(data), s)
}
