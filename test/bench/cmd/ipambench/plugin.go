package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Plugin kinds the driver knows how to configure.
const (
	kindHostLocal = "host-local"
	kindStickyIP  = "stickyip"
)

// reservationAnnotation is the pod annotation stickyip reads to keep an IP after DEL.
const reservationAnnotation = "io.kubernetes.cri/reserved-ip-duration"

// target is one plugin binary with its own data directory and network, invoked as a
// whole process exactly as a container runtime (or a main plugin such as bridge) would.
type target struct {
	kind     string // kindHostLocal or kindStickyIP
	bin      string // absolute path of the plugin binary
	dir      string // data directory owned by this target
	network  string // CNI network name
	subnet   string // the single range's subnet
	netnsDir string // where the fake netns files live
	emptyDir string // an empty host-local dir, so stickyip imports nothing by accident
	logFile  string // stickyip logFile ("" = stderr)
	// netnsTarget is what every pod's netns path links to: a namespace the driver made.
	netnsTarget string
}

// pod is the identity a runtime passes on ADD and DEL.
type pod struct {
	containerID string
	namespace   string
	name        string
	uid         string
	ifname      string
	annotations map[string]string
}

// callResult is what one plugin process returned.
type callResult struct {
	elapsed time.Duration
	ips     []net.IP
	stdout  []byte
	stderr  []byte
	err     error
}

// newPod returns a pod whose identity is derived from tag and i, so runs are repeatable.
// Container IDs look like a runtime's: 64 hex digits.
func newPod(tag string, i int) pod {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", tag, i)))
	h := hex.EncodeToString(sum[:])
	return pod{
		containerID: h,
		namespace:   "bench",
		name:        fmt.Sprintf("%s-%d", tag, i),
		uid:         h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32],
		ifname:      "eth0",
		annotations: map[string]string{
			"kubernetes.io/config.source": "api",
			"kubernetes.io/config.seen":   "2026-01-01T00:00:00Z",
		},
	}
}

// ipamConfig is the ipam block for this target.
func (t *target) ipamConfig() map[string]any {
	ipam := map[string]any{
		"type":    t.kind,
		"ranges":  [][]map[string]string{{{"subnet": t.subnet}}},
		"dataDir": t.dir,
	}
	if t.kind == kindStickyIP {
		ipam["hostLocalDataDir"] = t.emptyDir
		if t.logFile != "" {
			ipam["logFile"] = t.logFile
		}
	}
	return ipam
}

// stdin renders the network configuration the way bridge passes it to its IPAM plugin:
// the whole network config, runtimeConfig included.
func (t *target) stdin(p pod) []byte {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       t.network,
		"type":       "bridge",
		"bridge":     "cni0",
		"ipam":       t.ipamConfig(),
		"runtimeConfig": map[string]any{
			"io.kubernetes.cri.pod-annotations": p.annotations,
		},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		panic(err) // only maps of strings: cannot fail
	}
	return b
}

// netnsPath returns the pod's netns path. IPAM plugins never enter the namespace, but
// the CNI skeleton opens it (it must not be the plugin's own) and stickyip records the
// path and may later ask whether it still names a namespace. So each pod gets a symlink
// to one idle network namespace the driver created (see startNetns): it behaves like a
// running sandbox's bind mount.
func (t *target) netnsPath(p pod) string {
	return filepath.Join(t.netnsDir, "cni-"+p.containerID[:16])
}

// prepare creates the pod's netns path. It is not part of any timed call.
func (t *target) prepare(p pod) error {
	err := os.Symlink(t.netnsTarget, t.netnsPath(p))
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	return err
}

// startNetns starts an idle process in a new, empty network namespace (nothing is
// configured in it) and returns the path of that namespace and a function that ends
// the process by its PID.
func startNetns() (string, func(), error) {
	cmd := exec.Command("sleep", "86400")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting a process in a new network namespace (needs root): %w", err)
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), stop, nil
}

// call runs the plugin once with command (ADD, DEL, CHECK) for p and times the whole
// process, from fork to exit.
func (t *target) call(command string, p pod) callResult {
	args := strings.Join([]string{
		"IgnoreUnknown=1",
		"K8S_POD_NAMESPACE=" + p.namespace,
		"K8S_POD_NAME=" + p.name,
		"K8S_POD_INFRA_CONTAINER_ID=" + p.containerID,
		"K8S_POD_UID=" + p.uid,
	}, ";")
	cmd := exec.Command(t.bin)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=" + p.containerID,
		"CNI_NETNS=" + t.netnsPath(p),
		"CNI_IFNAME=" + p.ifname,
		"CNI_PATH=" + filepath.Dir(t.bin),
		"CNI_ARGS=" + args,
	}
	cmd.Stdin = bytes.NewReader(t.stdin(p))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	r := callResult{elapsed: time.Since(start), stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	if err != nil {
		r.err = fmt.Errorf("%s %s %s: %v: %s%s", t.kind, command, p.name, err,
			strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
		return r
	}
	if command == "ADD" {
		r.ips, r.err = parseIPs(r.stdout)
		if r.err == nil && len(r.ips) == 0 {
			r.err = fmt.Errorf("%s ADD %s: result has no IPs: %s", t.kind, p.name, r.stdout)
		}
	}
	return r
}

// parseIPs extracts the addresses of a CNI result (any 0.3.x/0.4.0/1.x result).
func parseIPs(stdout []byte) ([]net.IP, error) {
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil {
		return nil, fmt.Errorf("parsing CNI result %q: %w", stdout, err)
	}
	ips := make([]net.IP, 0, len(res.IPs))
	for _, a := range res.IPs {
		ip, _, err := net.ParseCIDR(a.Address)
		if err != nil {
			return nil, fmt.Errorf("parsing CNI result address %q: %w", a.Address, err)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// stickyipTool runs stickyip as the operator tool on this target's data directory.
func (t *target) stickyipTool(args ...string) ([]byte, error) {
	full := append([]string{"--data-dir", t.dir}, args...)
	cmd := exec.Command(t.bin, full...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("stickyip %s: %v: %s", strings.Join(full, " "), err,
			strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
