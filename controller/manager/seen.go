package manager

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/controller/facts"
	"github.com/stickyip/stickyip/controller/retention"
)

// seen is what the informers' handlers learn that the caches do not keep
// — the last facts of deleted pods, how StatefulSets went, since when
// Nodes are gone — and which records follow which pod or StatefulSet, so
// that a change to one judges only those again. The handlers and the pass
// share it.
type seen struct {
	mu      sync.Mutex
	tombs   map[types.UID]tomb
	sets    map[types.UID]setGone
	nodes   map[string]time.Time // Node name → when it was first seen gone
	byPod   map[types.UID]map[string]bool
	bySet   map[string]map[string]bool // namespace/name → records
	follows map[string]follows         // record → what it follows
}

type tomb struct {
	pod *facts.Pod
	at  time.Time
}

type setGone struct {
	how retention.Deletion
	at  time.Time
}

// follows is what one record's claims follow: pods they wait for or whose
// retention they decide, and StatefulSets (namespace/name).
type follows struct {
	pods []types.UID
	sets []string
}

func newSeen() *seen {
	return &seen{tombs: map[types.UID]tomb{}, sets: map[types.UID]setGone{}, nodes: map[string]time.Time{},
		byPod: map[types.UID]map[string]bool{}, bySet: map[string]map[string]bool{}, follows: map[string]follows{}}
}

// records returns the records of set, as a slice.
func records(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	return out
}

// podChanged returns the records that follow pod uid.
func (s *seen) podChanged(uid types.UID) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return records(s.byPod[uid])
}

// podDeleted keeps pod's last facts and returns the records that follow it.
func (s *seen) podDeleted(pod *facts.Pod, now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tombs[pod.UID] = tomb{pod: pod, at: now}
	return records(s.byPod[pod.UID])
}

// tomb returns the last facts of deleted pod uid and when it went.
func (s *seen) tomb(uid types.UID) (*facts.Pod, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tombs[uid]
	return t.pod, t.at
}

// setChanged returns the records that follow StatefulSet key.
func (s *seen) setChanged(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return records(s.bySet[key])
}

// setDeleted keeps how set went (its last state: the orphan finalizer
// tells an orphaning deletion) and returns the records that follow it.
func (s *seen) setDeleted(set *facts.StatefulSet, now time.Time) []string {
	how := retention.Cascaded
	if set.Orphaning() {
		how = retention.Orphaned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sets[set.UID] = setGone{how: how, at: now}
	return records(s.bySet[set.Namespace+"/"+set.Name])
}

// deletion returns how StatefulSet uid went (Unseen: not seen going).
func (s *seen) deletion(uid types.UID) retention.Deletion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sets[uid].how
}

// nodeGone notes that Node name is gone, from now unless noted earlier,
// and returns since when.
func (s *seen) nodeGone(name string, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.nodes[name]; ok {
		return t
	}
	s.nodes[name] = now
	return now
}

// nodeBack forgets that Node name was gone.
func (s *seen) nodeBack(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, name)
}

// follow replaces what record follows.
func (s *seen) follow(record string, f follows) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.follows[record]
	for _, uid := range old.pods {
		if m := s.byPod[uid]; m != nil {
			if delete(m, record); len(m) == 0 {
				delete(s.byPod, uid)
			}
		}
	}
	for _, k := range old.sets {
		if m := s.bySet[k]; m != nil {
			if delete(m, record); len(m) == 0 {
				delete(s.bySet, k)
			}
		}
	}
	if len(f.pods) == 0 && len(f.sets) == 0 {
		delete(s.follows, record)
		return
	}
	s.follows[record] = f
	for _, uid := range f.pods {
		if s.byPod[uid] == nil {
			s.byPod[uid] = map[string]bool{}
		}
		s.byPod[uid][record] = true
	}
	for _, k := range f.sets {
		if s.bySet[k] == nil {
			s.bySet[k] = map[string]bool{}
		}
		s.bySet[k][record] = true
	}
}

// prune forgets the pods and StatefulSets deleted longer than ttl ago.
func (s *seen) prune(now time.Time, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, t := range s.tombs {
		if now.Sub(t.at) >= ttl {
			delete(s.tombs, uid)
		}
	}
	for uid, g := range s.sets {
		if now.Sub(g.at) >= ttl {
			delete(s.sets, uid)
		}
	}
}
