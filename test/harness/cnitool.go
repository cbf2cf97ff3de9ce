package harness

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// libcniCacheDir is where libcni (and so cnitool) caches results; cnitool has
// no option to move it.
const libcniCacheDir = "/var/lib/cni"

// CNITool runs the pinned cnitool inside the node namespace, as a runtime on
// that node would call the CNI chain.
type CNITool struct {
	// Node is the namespace cnitool runs in. Required.
	Node *Netns
	// BinDir is CNI_PATH; ConfDir is NETCONFPATH.
	BinDir, ConfDir string
}

// PodArgs is what a runtime passes about a pod: CNI_ARGS and capability args.
type PodArgs struct {
	Namespace, Name, UID string
	// Annotations go to the io.kubernetes.cri.pod-annotations capability.
	Annotations map[string]string
	// IfName defaults to eth0.
	IfName string
	// Extra CNI_ARGS pairs, e.g. "IP=10.244.1.9".
	Extra []string
}

// CNIToolContainerID is the container ID cnitool derives from a netns path.
func CNIToolContainerID(netnsPath string) string {
	s := sha512.Sum512([]byte(netnsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

func (c CNITool) env(netnsPath string, a PodArgs) ([]string, error) {
	args := []string{"IgnoreUnknown=1"}
	if a.Namespace != "" {
		args = append(args, "K8S_POD_NAMESPACE="+a.Namespace)
	}
	if a.Name != "" {
		args = append(args, "K8S_POD_NAME="+a.Name)
	}
	if a.UID != "" {
		args = append(args, "K8S_POD_UID="+a.UID)
	}
	if netnsPath != "" {
		args = append(args, "K8S_POD_INFRA_CONTAINER_ID="+CNIToolContainerID(netnsPath))
	}
	args = append(args, a.Extra...)
	env := []string{"CNI_PATH=" + c.BinDir, "NETCONFPATH=" + c.ConfDir, "CNI_ARGS=" + strings.Join(args, ";")}
	if a.IfName != "" {
		env = append(env, "CNI_IFNAME="+a.IfName)
	}
	if len(a.Annotations) > 0 {
		capArgs, err := json.Marshal(map[string]any{"io.kubernetes.cri.pod-annotations": a.Annotations})
		if err != nil {
			return nil, err
		}
		env = append(env, "CAP_ARGS="+string(capArgs))
	}
	return env, nil
}

// Add runs `cnitool add net netns`. The libcni cache entry it writes is
// removed at cleanup.
func (c CNITool) Add(t testing.TB, net, netnsPath string, a PodArgs) (*CNIResult, error) {
	t.Helper()
	ifname := a.IfName
	if ifname == "" {
		ifname = "eth0"
	}
	t.Cleanup(func() { c.ForgetCache(net, netnsPath, ifname) })
	env, err := c.env(netnsPath, a)
	if err != nil {
		return nil, err
	}
	out, err := c.Node.Exec(env, CNIToolPath(), "add", net, netnsPath)
	if err != nil {
		return nil, err
	}
	return parseResult(out)
}

// Del runs `cnitool del net netns`.
func (c CNITool) Del(net, netnsPath string, a PodArgs) error {
	env, err := c.env(netnsPath, a)
	if err != nil {
		return err
	}
	_, err = c.Node.Exec(env, CNIToolPath(), "del", net, netnsPath)
	return err
}

// Check runs `cnitool check net netns`.
func (c CNITool) Check(net, netnsPath string, a PodArgs) error {
	env, err := c.env(netnsPath, a)
	if err != nil {
		return err
	}
	_, err = c.Node.Exec(env, CNIToolPath(), "check", net, netnsPath)
	return err
}

// GC runs `cnitool gc net`: libcni first DELs every attachment it has cached
// for net, then (cniVersion >= 1.1.0) calls each plugin's GC with no valid
// attachments.
func (c CNITool) GC(net string) error {
	env := []string{"CNI_PATH=" + c.BinDir, "NETCONFPATH=" + c.ConfDir}
	_, err := c.Node.Exec(env, CNIToolPath(), "gc", net, "/nonexistent")
	return err
}

// Status runs `cnitool status net` (CNI STATUS, cniVersion >= 1.1.0).
func (c CNITool) Status(net string) error {
	env := []string{"CNI_PATH=" + c.BinDir, "NETCONFPATH=" + c.ConfDir}
	_, err := c.Node.Exec(env, CNIToolPath(), "status", net, "/nonexistent")
	return err
}

// ForgetCache removes libcni's cached result for an attachment, as if the
// runtime had lost it; GC then cannot DEL it and only the plugins' GC can
// release it.
func (c CNITool) ForgetCache(net, netnsPath, ifname string) {
	name := fmt.Sprintf("%s-%s-%s", net, CNIToolContainerID(netnsPath), ifname)
	os.Remove(filepath.Join(libcniCacheDir, "results", name))
}

func parseResult(out string) (*CNIResult, error) {
	var r CNIResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("parse CNI result: %w: %s", err, out)
	}
	r.Raw = out
	return &r, nil
}
