package main

import (
	"github.com/stickyip/stickyip/test/harness"

	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	// hostLocalDir, when set, is stickyip's hostLocalDataDir instead of emptyDir
	// (a node switching from host-local).
	hostLocalDir string
	logFile      string // stickyip logFile ("" = stderr)
	// reservation, when set, is stickyip's reservation block (limits).
	reservation map[string]any
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
	ipam := harness.IPAM(t.kind, t.dir, []string{t.subnet})
	if t.kind == kindStickyIP {
		ipam["hostLocalDataDir"] = t.emptyDir
		if t.hostLocalDir != "" {
			ipam["hostLocalDataDir"] = t.hostLocalDir
		}
		if t.logFile != "" {
			ipam["logFile"] = t.logFile
		}
		if t.reservation != nil {
			ipam["reservation"] = t.reservation
		}
	}
	return ipam
}

// stdin renders the network configuration the way bridge passes it to its IPAM plugin:
// the whole network config, runtimeConfig included.
func (t *target) stdin(p pod) []byte {
	conf := harness.WithAnnotations(harness.NetConf("1.0.0", t.network, t.ipamConfig()), p.annotations)
	conf["bridge"] = "cni0"
	return harness.Encode(conf)
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

// startNetns makes the one idle network namespace every pod's netns path
// links to, and returns its path and a function that deletes it.
func startNetns() (string, func(), error) {
	n, err := harness.CreateNetns("bench")
	if err != nil {
		if n != nil {
			_ = n.Delete()
		}
		return "", nil, fmt.Errorf("creating a network namespace (needs root): %w", err)
	}
	return n.Path, func() { _ = n.Delete() }, nil
}

// call runs the plugin once with command (ADD, DEL, CHECK) for p and times the whole
// process, from fork to exit (the harness's runner, as every test tier runs the plugin).
func (t *target) call(command string, p pod) callResult {
	return t.callAs(t.kind, t.bin, command, p)
}

// callAs is call with another binary, named name in errors (the Go floor).
func (t *target) callAs(name, bin, command string, p pod) callResult {
	o := (&harness.Plugin{Path: bin}).CNI(harness.CNICall{
		Command: command, ContainerID: p.containerID, Netns: t.netnsPath(p), IfName: p.ifname,
		Args: harness.PodCNIArgs(p.namespace, p.name, p.uid, p.containerID), Stdin: t.stdin(p),
	})
	r := callResult{elapsed: o.Elapsed, stdout: o.Stdout, stderr: o.Stderr}
	if !o.OK() {
		r.err = fmt.Errorf("%s %s %s: %s", name, command, p.name, o.Describe())
		return r
	}
	if command == "ADD" {
		r.ips, r.err = parseIPs(r.stdout)
		if r.err == nil && len(r.ips) == 0 {
			r.err = fmt.Errorf("%s ADD %s: result has no IPs: %s", name, p.name, r.stdout)
		}
	}
	return r
}

// parseIPs extracts the addresses of a CNI result (any 0.3.x/0.4.0/1.x result).
func parseIPs(stdout []byte) ([]net.IP, error) {
	var res harness.CNIResult
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
	o := (&harness.Plugin{Path: t.bin}).Tool(full...)
	if o.ExitCode != 0 || o.StartErr != nil {
		return o.Stdout, fmt.Errorf("stickyip %s: %s", strings.Join(full, " "), o.Describe())
	}
	return o.Stdout, nil
}
