package reconcile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/safefile"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// Metric labels of checkpointd_copies_removed_total.
var whyLabel = map[state.Why]string{
	state.WhyRefused:       "refused",
	state.WhyNoCheckpoint:  "no-checkpoint",
	state.WhyParentRuns:    "parent-runs",
	state.WhyHandBack:      "hand-back",
	state.WhyParentNotHere: "parent-not-here",
}

// removeCopy deletes id's static manifest; the kubelet then stops the copy
// (its CNI DEL turns the IP into a reservation for the parent, which the
// copy's annotation names). Its files stay until its sandbox is gone.
func (r *Reconciler) removeCopy(s *snapshot, id checkpoint.ID, why state.Why) {
	if err := removeCopy(r.cfg.StaticDir, id); err != nil {
		r.problem(id, "remove-copy", "cannot remove the static copy", err)
		return
	}
	r.solved(id, "remove-copy")
	delete(s.copies, id)
	r.cfg.Metrics.CopiesRemoved.WithLabelValues(whyLabel[why]).Inc()
	if why == state.WhyHandBack {
		r.cfg.Metrics.HandBacksTotal.Inc()
	}
	r.cfg.Log.Info("static copy removed: "+string(why), "pod", id.String())
	if p := s.parents[id]; p != nil && why == state.WhyHandBack {
		msg := "static copy removed; the pod and its IP are handed back"
		if rs := r.mem(id).copy; rs != nil {
			msg = fmt.Sprintf("static copy, restored by checkpointd %s ago while the API server was away, removed; the pod and its IP are handed back",
				s.now.Sub(rs.at).Round(time.Second))
		}
		r.event(s, p, corev1.EventTypeNormal, EventHandedBack, "%s", msg)
	}
	r.mem(id).copy = nil
}

// removeFiles deletes the files of a copy whose manifest and sandbox are gone.
func (r *Reconciler) removeFiles(id checkpoint.ID) {
	if err := os.RemoveAll(filepath.Join(r.cfg.VolumeDir, sanitize.VolumeRoot(id))); err != nil {
		r.problem(id, "files", "cannot remove the copy's files", err)
		return
	}
	r.solved(id, "files")
	r.cfg.Log.Info("files of a removed static copy deleted", "pod", id.String())
}

// copyPaths returns every path id's static manifest may have: its current
// name and the legacy one an earlier version wrote.
func copyPaths(staticDir string, id checkpoint.ID) []string {
	return []string{copyPath(staticDir, id), filepath.Join(staticDir, checkpoint.StaticPrefix+id.Key()+checkpoint.LegacyStaticSuffix)}
}

// removeCopy deletes id's static manifest, under its current and its legacy
// name.
func removeCopy(staticDir string, id checkpoint.ID) error {
	for _, p := range copyPaths(staticDir, id) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return safefile.SyncDir(staticDir)
}

// RemoveCopies deletes every static copy in staticDir (checkpointd's own
// files only, by their prefix), and, with volumeDir set, every copy's files
// (`checkpointd cleanup --all`). It returns what it removed.
func RemoveCopies(staticDir, volumeDir string) ([]string, error) {
	var removed []string
	copies, err := listCopies(staticDir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for id := range copies {
		if err := removeCopy(staticDir, id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, copyPath(staticDir, id))
	}
	if volumeDir != "" {
		files, err := listFiles(volumeDir)
		if err != nil {
			errs = append(errs, err)
		}
		for id := range files {
			p := filepath.Join(volumeDir, sanitize.VolumeRoot(id))
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// stashPrefix starts the name, inside a copy's volume directory, of its
// manifest set aside when checkpointd stopped: ".static-<its file name in
// the static pod directory>" (a volume name never starts with a dot).
const stashPrefix = ".static-"

// StopCopies is what happens when checkpointd stops (its own exit, and the
// unit's `checkpointd cleanup` after any stop, crashes included): every
// copy's manifest leaves staticDir, so that a copy nobody watches never
// blocks its parent (the kubelet stops it once it reaches the API server);
// its exact bytes are set aside in the copy's volume directory (tmpfs, with
// the files it keeps), so that a checkpointd started again during the
// outage, of this version or another, puts back the very manifest the
// running copy came from: same file, same content, the same pod for the
// kubelet. It returns the manifests it removed.
func StopCopies(staticDir, volumeDir string) ([]string, error) {
	copies, err := listCopies(staticDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for id := range copies {
		var present []string
		for _, p := range copyPaths(staticDir, id) {
			if _, err := os.Lstat(p); err != nil {
				continue
			}
			present = append(present, p)
			if err := stash(p, volumeDir, id); err != nil {
				errs = append(errs, err) // removed all the same: no copy outlives its keeper
			}
		}
		if err := removeCopy(staticDir, id); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, present...)
	}
	return removed, errors.Join(errs...)
}

// stash sets the manifest at path aside in id's volume directory.
func stash(path, volumeDir string, id checkpoint.ID) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	base := filepath.Join(volumeDir, sanitize.VolumeRoot(id))
	if err := mkdirMode(volumeDir, modeVolumeDir, -1); err != nil {
		return err
	}
	if err := mkdirMode(base, modePodDir, -1); err != nil {
		return err
	}
	return safefile.Write(filepath.Join(base, stashPrefix+filepath.Base(path)), data, 0o600)
}

// stashed returns the manifest StopCopies set aside for id: its file name
// in the static pod directory and its content.
func stashed(volumeDir string, id checkpoint.ID) (string, []byte, bool) {
	base := filepath.Join(volumeDir, sanitize.VolumeRoot(id))
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), stashPrefix)
		if !ok || !e.Type().IsRegular() || !strings.HasPrefix(name, checkpoint.StaticPrefix) {
			continue
		}
		if data, err := os.ReadFile(filepath.Join(base, e.Name())); err == nil {
			return name, data, true
		}
	}
	return "", nil, false
}
