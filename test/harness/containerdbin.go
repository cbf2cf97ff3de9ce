package harness

// Which containerd the harness runs: the binaries' directory and the version
// they report.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// containerdBinaries are what ContainerdBinDir must hold.
var containerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// ContainerdBinDir is the directory of the containerd, containerd-shim-runc-v2
// and ctr the harness runs. $STICKYIP_CONTAINERD selects it: unset, the
// pinned 2.x that scripts/install-deps.sh builds into <output>/containerd/bin;
// "debian", Debian's containerd 1.6 in /usr/bin (the legacy run); an absolute
// path, the binaries in that directory (e.g. another 2.x release).
func ContainerdBinDir() string {
	switch v := os.Getenv("STICKYIP_CONTAINERD"); v {
	case "":
		return filepath.Join(OutputDir(), "containerd", "bin")
	case "debian":
		return "/usr/bin"
	default:
		return v
	}
}

// missingContainerd lists the binaries ContainerdBinDir lacks.
func missingContainerd() []string {
	dir := ContainerdBinDir()
	if !filepath.IsAbs(dir) {
		return []string{fmt.Sprintf("STICKYIP_CONTAINERD=%s (want unset, \"debian\" or an absolute directory)", dir)}
	}
	var missing []string
	for _, b := range containerdBinaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, filepath.Join(dir, b))
		}
	}
	return missing
}

// ContainerdVersion returns the version `containerd --version` of
// ContainerdBinDir reports and its major number.
func ContainerdVersion() (string, int, error) {
	out, err := Run(nil, filepath.Join(ContainerdBinDir(), "containerd"), "--version")
	if err != nil {
		return "", 0, err
	}
	return parseContainerdVersion(out)
}

// parseContainerdVersion reads `containerd --version`:
// "containerd github.com/containerd/containerd/v2 2.3.7+unknown <revision>".
func parseContainerdVersion(out string) (string, int, error) {
	f := strings.Fields(out)
	if len(f) < 3 {
		return "", 0, fmt.Errorf("containerd --version: unexpected output %q", out)
	}
	v := strings.TrimPrefix(f[2], "v")
	major, err := strconv.Atoi(v[:strings.IndexFunc(v+".", func(r rune) bool { return r < '0' || r > '9' })])
	if err != nil {
		return "", 0, fmt.Errorf("containerd --version: version %q: %w", f[2], err)
	}
	return v, major, nil
}
