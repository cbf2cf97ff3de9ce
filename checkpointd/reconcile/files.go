package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/safefile"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
)

// File permissions of a copy's secret/configMap files, set explicitly (the
// systemd unit runs with UMask=0077, which must not make them root-only):
//
//	<volume-dir>/                       0700 root:root   only root on the host
//	└── <namespace>_<name>/             0700 root:root   (containers never see it)
//	    └── <volume>/                   0755 root:<fsGroup or root>
//	        └── <key files>             the kubelet's modes: item mode, else
//	                                    defaultMode, else 0644; with an
//	                                    fsGroup, group fsGroup and g+r
//
// Inside the container a volume looks as the kubelet would make it, so a
// container running as any user reads what the pod spec lets it read; on the
// host nobody but root reaches the files.
const (
	modeVolumeDir = 0o700
	modePodDir    = 0o700
	modeMountDir  = 0o755
)

// writeFiles materializes the copy's secret/configMap files from res.
func writeFiles(volumeDir string, id checkpoint.ID, res *sanitize.Result) error {
	if err := mkdirMode(volumeDir, modeVolumeDir, -1); err != nil {
		return err
	}
	base := filepath.Join(volumeDir, sanitize.VolumeRoot(id))
	if err := os.RemoveAll(base); err != nil {
		return err
	}
	if err := mkdirMode(base, modePodDir, -1); err != nil {
		return err
	}
	gid := -1
	if sc := res.Pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		gid = int(*sc.FSGroup)
	}
	// Every directory a converted volume mounts must exist, files or not.
	for _, d := range convertedDirs(res.Pod, volumeDir, id) {
		if err := mkdirMode(d, modeMountDir, gid); err != nil {
			return err
		}
	}
	for _, f := range res.Files {
		p := filepath.Join(volumeDir, filepath.FromSlash(f.Path))
		if !strings.HasPrefix(p, base+string(filepath.Separator)) {
			return fmt.Errorf("file %q escapes the volume directory", f.Path)
		}
		// Item paths may have directories of their own (private/tls.key).
		for d := filepath.Dir(p); len(d) > len(base); d = filepath.Dir(d) {
			if _, err := os.Stat(d); os.IsNotExist(err) {
				if err := mkdirAllMode(d, base, modeMountDir, gid); err != nil {
					return err
				}
				break
			}
		}
		if err := safefile.Write(p, f.Data, os.FileMode(f.Mode)); err != nil {
			return err
		}
		if f.GID != nil {
			if err := os.Lchown(p, -1, int(*f.GID)); err != nil {
				return err
			}
		}
	}
	return safefile.SyncDir(base)
}

// convertedDirs lists the host directories the copy's converted volumes mount.
func convertedDirs(pod *corev1.Pod, volumeDir string, id checkpoint.ID) []string {
	base := filepath.Join(volumeDir, sanitize.VolumeRoot(id)) + string(filepath.Separator)
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, base) {
			out = append(out, v.HostPath.Path)
		}
	}
	return out
}

// mkdirMode creates dir if needed and sets its mode (and group, gid ≥ 0)
// whatever the umask.
func mkdirMode(dir string, mode os.FileMode, gid int) error {
	if err := os.Mkdir(dir, mode); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return err
	}
	if gid >= 0 {
		return os.Lchown(dir, -1, gid)
	}
	return nil
}

// mkdirAllMode creates dir and its missing parents below base with mode and gid.
func mkdirAllMode(dir, base string, mode os.FileMode, gid int) error {
	if dir == base || len(dir) <= len(base) {
		return nil
	}
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := mkdirAllMode(filepath.Dir(dir), base, mode, gid); err != nil {
		return err
	}
	return mkdirMode(dir, mode, gid)
}
