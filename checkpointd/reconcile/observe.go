package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/sanitize"
	"github.com/stickyip/stickyip/checkpointd/state"
	"github.com/stickyip/stickyip/contract"
)

// snapshot is everything a pass looks at, read once at its start.
type snapshot struct {
	now time.Time
	api state.API
	// parents are the pods the API server lists as bound here, opted in, not
	// terminating or finished (only while the API server answers).
	parents map[checkpoint.ID]*corev1.Pod
	// bound are all opted-in pods the API lists here, finished ones too.
	bound   []checkpoint.ID
	records map[checkpoint.ID]*checkpoint.Record
	corrupt []checkpoint.Corrupt
	// copies: our static manifests; files: our copies' volume directories.
	copies, files map[checkpoint.ID]bool
	// running: a ready sandbox of the parent; copyRunning: of our copy.
	running, copyRunning map[checkpoint.ID]bool
	sandboxes            []cri.Sandbox
	// ipam is the IPAM store and the CNI configuration as read once for
	// the pass (nil without an IPAM, or when ipamErr says why not).
	ipam    *ipamstore.View
	ipamErr error
	// objects are the Secrets and ConfigMaps read this pass (object).
	objects map[string]objectRead
}

// ids returns every identity the snapshot knows of, sorted.
func (s *snapshot) ids() []checkpoint.ID {
	seen := map[checkpoint.ID]bool{}
	for _, m := range []map[checkpoint.ID]bool{s.copies, s.files, s.copyRunning} {
		for id := range m {
			seen[id] = true
		}
	}
	for id := range s.parents {
		seen[id] = true
	}
	for id := range s.records {
		seen[id] = true
	}
	out := make([]checkpoint.ID, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b checkpoint.ID) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

func (r *Reconciler) observe(ctx context.Context) (*snapshot, error) {
	s := &snapshot{now: r.cfg.Now(), parents: map[checkpoint.ID]*corev1.Pod{},
		records: map[checkpoint.ID]*checkpoint.Record{}, running: map[checkpoint.ID]bool{}, copyRunning: map[checkpoint.ID]bool{}}
	var err error
	// Without the runtime's view nothing can be decided safely.
	if s.sandboxes, err = r.cfg.Runtime.Sandboxes(ctx); err != nil {
		return nil, err
	}
	recs, corrupt, err := r.cfg.Store.List()
	if err != nil {
		return nil, err
	}
	s.corrupt = corrupt
	for _, rec := range recs {
		s.records[rec.ID()] = rec
	}
	if s.copies, err = listCopies(r.cfg.StaticDir); err != nil {
		return nil, err
	}
	if s.files, err = listFiles(r.cfg.VolumeDir); err != nil {
		return nil, err
	}
	r.observeIPAM(s)

	reachable, since := r.cfg.API.Reachable()
	pods, synced := r.cfg.API.Pods()
	switch {
	case reachable && synced && s.now.Sub(since) >= r.cfg.Stable:
		s.api = state.APIReachable
	case reachable && synced:
		s.api = state.APIRecovering
	case s.now.Sub(since) >= r.cfg.Grace:
		s.api = state.APIUnreachableForGrace
	default:
		s.api = state.APIUnreachable
	}
	if s.api == state.APIReachable || s.api == state.APIRecovering {
		for _, p := range pods {
			if p.Spec.NodeName != r.cfg.Node || sanitize.IsCopy(p) || !sanitize.OptedIn(p) {
				continue
			}
			id := checkpoint.ID{Namespace: p.Namespace, Name: p.Name}
			s.bound = append(s.bound, id)
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				s.parents[id] = p
			}
		}
	}

	for _, sb := range s.sandboxes {
		if !sb.Ready {
			continue
		}
		if of, ok := sb.Annotations[contract.AnnotationCheckpointOf]; ok && sb.Annotations[contract.AnnotationConfigSource] == contract.ConfigSourceFile {
			if ns, name, err := contract.ParseCheckpointOf(of); err == nil {
				s.copyRunning[checkpoint.ID{Namespace: ns, Name: name}] = true
			}
			continue
		}
		id := checkpoint.ID{Namespace: sb.Namespace, Name: sb.Name}
		if p, ok := s.parents[id]; ok && string(p.UID) != sb.UID {
			continue // an older incarnation: not the pod we would save
		}
		s.running[id] = true
	}
	return s, nil
}

// observeIPAM reads the IPAM store and the CNI configuration into s. A
// store that cannot be read is a problem of the IPAM steps, not of the
// pass: the pods are decided all the same.
func (r *Reconciler) observeIPAM(s *snapshot) {
	if r.cfg.IPAM == nil {
		return
	}
	s.ipam, s.ipamErr = r.cfg.IPAM.Observe()
	if s.ipamErr != nil {
		s.ipam = nil
	}
}

// copyPath returns the static manifest path of id's copy.
func copyPath(staticDir string, id checkpoint.ID) string {
	return filepath.Join(staticDir, id.StaticName())
}

// listCopies lists the static copies present in the static pod directory,
// those an earlier version wrote under the legacy name too.
func listCopies(dir string) (map[checkpoint.ID]bool, error) {
	out := map[checkpoint.ID]bool{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read static pod dir: %w", err)
	}
	for _, e := range entries {
		if id, ok := copyID(e.Name()); ok {
			out[id] = true
		}
	}
	return out, nil
}

// copyID returns the identity whose static copy file name is name, current
// or legacy.
func copyID(name string) (checkpoint.ID, bool) {
	rest, ok := strings.CutPrefix(name, checkpoint.StaticPrefix)
	if !ok {
		return checkpoint.ID{}, false
	}
	key, ok := strings.CutSuffix(rest, checkpoint.StaticSuffix)
	if !ok {
		if key, ok = strings.CutSuffix(rest, checkpoint.LegacyStaticSuffix); !ok {
			return checkpoint.ID{}, false
		}
	}
	return splitID(key)
}

// listFiles lists the copies' volume directories (<namespace>_<name>).
func listFiles(dir string) (map[checkpoint.ID]bool, error) {
	out := map[checkpoint.ID]bool{}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read volume dir: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if id, ok := splitID(e.Name()); ok {
			out[id] = true
		}
	}
	return out, nil
}

// splitID parses "<namespace>_<name>" (names cannot contain '_').
func splitID(s string) (checkpoint.ID, bool) {
	id, ok := checkpoint.SplitKey(s)
	if !ok || !contract.IsNamespace(id.Namespace) || !contract.IsPodName(id.Name) {
		return checkpoint.ID{}, false
	}
	return id, true
}
