package reconcile

import (
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/safefile"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// restore is a copy checkpointd wrote, followed until it runs and until it
// is handed back.
type restore struct {
	at       time.Time // manifest written
	runAt    time.Time // first seen with a ready sandbox
	reported bool      // "no sandbox yet" already reported
}

// restore carries out Restore and WriteFiles for id: the copy's manifest is
// sanitized and validated as the kubelet validates static pods; its
// secret/configMap files are written first, then the manifest. A copy that
// already runs (checkpointd restarted during the outage) gets the same
// manifest again, which the kubelet takes for the same pod.
func (r *Reconciler) restore(s *snapshot, id checkpoint.ID, a state.Actions, running bool) {
	res, err := sanitize.Manifest(s.records[id], r.manifestOptions())
	if err == nil {
		err = sanitize.Validate(res.Pod, r.cfg.Node)
	}
	if err != nil {
		r.cfg.Metrics.RestoreFailures.WithLabelValues("invalid-manifest").Inc()
		r.problem(id, "restore", "cannot restore: the static copy would be invalid", err)
		return
	}
	if a.WriteFiles && (a.Restore || len(res.Files) > 0 || hasConvertedVolumes(res.Pod, r.cfg.VolumeDir, id)) {
		if err := writeFiles(r.cfg.VolumeDir, id, res); err != nil {
			r.problem(id, "files", "cannot write the copy's secret and configMap files", err)
			return
		}
		r.solved(id, "files")
		s.files[id] = true
		if !a.Restore {
			r.cfg.Log.Info("static copy in place but its files were missing (reboot?): rewritten", "pod", id.String())
		}
	}
	if !a.Restore {
		return
	}
	path := copyPath(r.cfg.StaticDir, id)
	data, err := sanitize.Marshal(res.Pod)
	name, old, ok := "", []byte(nil), false
	if running {
		name, old, ok = stashed(r.cfg.VolumeDir, id)
	}
	if ok {
		// The running copy's own manifest, as the stopped checkpointd left it.
		path, data, err = filepath.Join(r.cfg.StaticDir, name), old, nil
	}
	if err == nil {
		err = os.MkdirAll(r.cfg.StaticDir, 0o755)
	}
	if err == nil {
		err = safefile.Write(path, data, 0o600)
	}
	if err != nil {
		r.problem(id, "restore", "cannot write the static copy", err)
		return
	}
	if ok {
		_ = os.Remove(filepath.Join(r.cfg.VolumeDir, sanitize.VolumeRoot(id), stashPrefix+name))
	}
	r.solved(id, "restore")
	s.copies[id] = true
	m := r.mem(id)
	if running {
		// Followed for the hand-back only: it has run all along.
		m.copy = &restore{at: s.now, runAt: s.now}
		r.cfg.Log.Info("static copy runs without its manifest (checkpointd restarted during the outage): the same manifest written again, its files kept",
			"pod", id.String(), "manifest", path, "setAside", ok)
		return
	}
	m.copy = &restore{at: s.now}
	r.cfg.Metrics.RestoresTotal.Inc()
	r.cfg.Log.Info("API server unreachable for the grace period and the kubelet cannot know this pod: static copy restored",
		"pod", id.String(), "manifest", copyPath(r.cfg.StaticDir, id))
}

// confirmRestores follows the copies written by this process: the time
// until their sandbox runs is logged; a copy with no running sandbox after
// RestoreTimeout is reported (the kubelet rejected it, or it cannot start).
func (r *Reconciler) confirmRestores(s *snapshot) {
	for id, m := range r.pods {
		rs := m.copy
		switch {
		case rs == nil:
		case !s.copies[id]:
			m.copy = nil
		case s.copyRunning[id] && rs.runAt.IsZero():
			rs.runAt = s.now
			r.cfg.Metrics.RestoreSeconds.Observe(s.now.Sub(rs.at).Seconds())
			r.solved(id, "restore-confirm")
			r.cfg.Log.Info("static copy runs", "pod", id.String(), "after", s.now.Sub(rs.at).Round(time.Millisecond).String())
		case !s.copyRunning[id] && rs.runAt.IsZero() && !rs.reported && s.now.Sub(rs.at) >= r.cfg.RestoreTimeout:
			rs.reported = true
			r.cfg.Metrics.RestoreFailures.WithLabelValues("no-sandbox").Inc()
			r.problem(id, "restore-confirm", "static copy written but no sandbox of it runs; see the kubelet's log for why it rejected or cannot start it",
				nil)
		}
	}
}

// hasConvertedVolumes reports whether pod mounts directories checkpointd makes.
func hasConvertedVolumes(pod *corev1.Pod, volumeDir string, id checkpoint.ID) bool {
	return len(convertedDirs(pod, volumeDir, id)) > 0
}
