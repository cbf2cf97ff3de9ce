package formats

// The verbose information a container runtime gives about a pod sandbox
// (CRI PodSandboxStatus with verbose set, key "info"): containerd and CRI-O
// both put the sandbox's OCI runtime spec there, whose network namespace
// path is the one the sandbox's CNI calls were given, and the pid of its
// pause process.

import (
	"encoding/json"
	"fmt"
)

// SandboxInfoKey is the key of the verbose information in
// PodSandboxStatus's info map.
const SandboxInfoKey = "info"

// maxSandboxInfo bounds what is parsed: a runtime spec is a few KiB.
const maxSandboxInfo = 1 << 20

// SandboxInfo is what a rebuild needs from the verbose information.
type SandboxInfo struct {
	// Netns is the path of the sandbox's network namespace ("": none in
	// the spec, e.g. a hostNetwork sandbox).
	Netns string
	// Pid is the pause process's pid (0: unknown or not running).
	Pid int
}

type sandboxInfo struct {
	Pid         int `json:"pid"`
	RuntimeSpec *struct {
		Linux *struct {
			Namespaces []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	} `json:"runtimeSpec"`
}

// ParseSandboxInfo reads the value of SandboxInfoKey. A value that is not a JSON object with the
// fields' types is an error; absent fields are zero.
func ParseSandboxInfo(v string) (SandboxInfo, error) {
	if len(v) > maxSandboxInfo {
		return SandboxInfo{}, fmt.Errorf("sandbox info of %d bytes, more than %d", len(v), maxSandboxInfo)
	}
	var in sandboxInfo
	if err := json.Unmarshal([]byte(v), &in); err != nil {
		return SandboxInfo{}, fmt.Errorf("sandbox info: %v", err)
	}
	if in.Pid < 0 {
		return SandboxInfo{}, fmt.Errorf("sandbox info: pid %d", in.Pid)
	}
	out := SandboxInfo{Pid: in.Pid}
	if in.RuntimeSpec != nil && in.RuntimeSpec.Linux != nil {
		for _, ns := range in.RuntimeSpec.Linux.Namespaces {
			if ns.Type == "network" {
				out.Netns = ns.Path
			}
		}
	}
	return out, nil
}
