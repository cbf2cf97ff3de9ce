package reconcile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
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

func removeCopy(staticDir string, id checkpoint.ID) error {
	if err := os.Remove(copyPath(staticDir, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return checkpoint.SyncDir(staticDir)
}

// RemoveCopies deletes every static copy in staticDir (checkpointd's own
// files only, by their prefix), and, with volumeDir set, every copy's files.
// It is what happens when checkpointd stops: no copy outlives its keeper,
// because nobody else would ever hand it back. It returns what it removed.
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
