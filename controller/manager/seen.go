package manager

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/controller/facts"
	"github.com/stickyip/stickyip/controller/retention"
)

// seen is what the informers' handlers learn that the caches do not keep
// — each live pod's key by UID, the last facts of deleted pods, how
// StatefulSets went, since when Nodes are gone — and which records follow
// which pod or StatefulSet, so that a change to one judges only those
// again. The handlers and the pass share it. Its maps hold slices, not
// sets: a pod is followed by one record, a StatefulSet by a few.
type seen struct {
	mu      sync.Mutex
	pods    map[types.UID]string // live pod → its cache key (namespace/name)
	tombs   map[types.UID]tomb
	sets    map[types.UID]setGone
	nodes   map[string]time.Time // Node name → when it was first seen gone
	byPod   map[types.UID][]string
	bySet   map[string][]string // namespace/name → records
	follows map[string]follows  // record → what it follows
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
	return &seen{pods: map[types.UID]string{}, tombs: map[types.UID]tomb{}, sets: map[types.UID]setGone{}, nodes: map[string]time.Time{},
		byPod: map[types.UID][]string{}, bySet: map[string][]string{}, follows: map[string]follows{}}
}

// podChanged notes live pod's key and returns the records that follow it.
func (s *seen) podChanged(pod *facts.Pod) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pods[pod.UID]; !ok {
		s.pods[pod.UID] = pod.Namespace + "/" + pod.Name
	}
	return slices.Clone(s.byPod[pod.UID])
}

// podDeleted keeps pod's last facts and returns the records that follow it.
func (s *seen) podDeleted(pod *facts.Pod, now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, pod.UID)
	s.tombs[pod.UID] = tomb{pod: pod, at: now}
	return slices.Clone(s.byPod[pod.UID])
}

// podKey returns the cache key of live pod uid ("": not known).
func (s *seen) podKey(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods[uid]
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
	return slices.Clone(s.bySet[key])
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
	return slices.Clone(s.bySet[set.Namespace+"/"+set.Name])
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
		unfollow(s.byPod, uid, record)
	}
	for _, k := range old.sets {
		unfollow(s.bySet, k, record)
	}
	if len(f.pods) == 0 && len(f.sets) == 0 {
		delete(s.follows, record)
		return
	}
	slices.Sort(f.sets)
	f.sets = slices.Compact(f.sets)
	s.follows[record] = f
	for _, uid := range f.pods {
		s.byPod[uid] = append(s.byPod[uid], record)
	}
	for _, k := range f.sets {
		s.bySet[k] = append(s.bySet[k], record)
	}
}

// unfollow takes record off what follows k.
func unfollow[K comparable](by map[K][]string, k K, record string) {
	rs := slices.DeleteFunc(by[k], func(r string) bool { return r == record })
	if len(rs) == 0 {
		delete(by, k)
	} else {
		by[k] = rs
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
