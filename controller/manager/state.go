package manager

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/controller/index"
)

// claimKey names a claim within a record: its namespace and identity.
type claimKey struct{ namespace, identity string }

// pendingKey names the pod an entry waits for.
type pendingKey struct {
	claimKey
	pod types.UID
}

// state is what the passes of one term keep between them; only the pass
// goroutine touches it (the status writers read winners alone, while no
// pass changes it).
type state struct {
	// contrib is each record's accepted claims: its candidates in cands.
	contrib map[string][]claimKey
	// cands is every candidate of each namespace's identities, one per
	// node (a slice: most identities have one).
	cands map[string]map[string][]index.Candidate
	// winners is each namespace's index as last written; synced says which
	// namespaces it knows (all of them once the term's first pass wrote).
	winners map[string]map[string]string
	synced  map[string]bool
	// pending is when each waiting entry's pod was first found unknown.
	pending map[string]map[pendingKey]time.Time
	// identities counts the identities of winners.
	identities int
}

func newState() *state {
	return &state{contrib: map[string][]claimKey{}, cands: map[string]map[string][]index.Candidate{},
		winners: map[string]map[string]string{}, synced: map[string]bool{}, pending: map[string]map[pendingKey]time.Time{}}
}

// setContrib replaces the candidates of record (node) and returns the
// namespaces whose candidates changed.
func (s *state) setContrib(node string, next map[claimKey]index.Candidate) map[string]bool {
	dirty := map[string]bool{}
	for _, k := range s.contrib[node] {
		if _, ok := next[k]; !ok {
			dirty[k.namespace] = true
			s.dropCand(k, node)
		}
	}
	keys := make([]claimKey, 0, len(next))
	for k, c := range next {
		keys = append(keys, k)
		if s.putCand(k, c) {
			dirty[k.namespace] = true
		}
	}
	if len(keys) == 0 {
		delete(s.contrib, node)
	} else {
		s.contrib[node] = keys
	}
	return dirty
}

// putCand sets c as its node's candidate for k; false: it already was.
func (s *state) putCand(k claimKey, c index.Candidate) bool {
	ns := s.cands[k.namespace]
	if ns == nil {
		ns = map[string][]index.Candidate{}
		s.cands[k.namespace] = ns
	}
	cs := ns[k.identity]
	for i := range cs {
		if cs[i].Node == c.Node {
			if cs[i] == c {
				return false
			}
			cs[i] = c
			return true
		}
	}
	ns[k.identity] = append(cs, c)
	return true
}

func (s *state) dropCand(k claimKey, node string) {
	ns := s.cands[k.namespace]
	if ns == nil {
		return
	}
	cs := slices.DeleteFunc(ns[k.identity], func(c index.Candidate) bool { return c.Node == node })
	if len(cs) == 0 {
		delete(ns, k.identity)
	} else {
		ns[k.identity] = cs
	}
	if len(ns) == 0 {
		delete(s.cands, k.namespace)
	}
}

// want returns the index namespace should hold: each identity's winner.
func (s *state) want(namespace string) map[string]string {
	out := make(map[string]string, len(s.cands[namespace]))
	for id, cs := range s.cands[namespace] {
		if w, ok := index.Winner(cs); ok {
			out[id] = w.Node
		}
	}
	return out
}

// setWinners records namespace's index as written and returns the nodes
// that won or lost an identity by it.
func (s *state) setWinners(namespace string, next map[string]string) map[string]bool {
	prev := s.winners[namespace]
	nodes := map[string]bool{}
	for id, n := range prev {
		if next[id] != n {
			nodes[n] = true
		}
	}
	for id, n := range next {
		if prev[id] != n {
			nodes[n] = true
		}
	}
	s.identities += len(next) - len(prev)
	s.synced[namespace] = true
	if len(next) == 0 {
		delete(s.winners, namespace)
	} else {
		s.winners[namespace] = next
	}
	return nodes
}
