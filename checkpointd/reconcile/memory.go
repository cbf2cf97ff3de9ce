package reconcile

import (
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// memory is everything the loop remembers about one pod identity between
// passes. It lives while the identity is in a snapshot (a parent the API
// lists, a checkpoint, a copy's manifest, files or sandbox) and is pruned
// with it.
type memory struct {
	// heard: the API server has said, during this run, whether the parent
	// is present (present) or not.
	heard, present bool
	// absentSince: when the API server first said the parent is gone.
	absentSince time.Time
	// staleMark: the parent's absence mark on disk still has to be cleared
	// (the API lists the parent again; a failed removal is retried).
	staleMark bool
	// captured: the last read of the parent's Secrets and ConfigMaps.
	captured time.Time
	// capturedRV: the parent's resourceVersion then (an object unchanged
	// since needs no comparison).
	capturedRV string
	// copy: the static copy this run wrote, followed until it runs and
	// until it is handed back.
	copy *restore
	// reported: per topic, the last message logged (logs and Events only:
	// nothing is decided on it).
	reported map[string]string
	// decided: the last decision logged.
	decided *decision
}

// mem returns id's memory, creating it.
func (r *Reconciler) mem(id checkpoint.ID) *memory {
	m := r.pods[id]
	if m == nil {
		m = &memory{reported: map[string]string{}}
		r.pods[id] = m
	}
	return m
}

// prune forgets the identities the pass did not see.
func (r *Reconciler) prune(s *snapshot) {
	seen := map[checkpoint.ID]bool{}
	for _, id := range s.ids() {
		seen[id] = true
	}
	for id := range r.pods {
		if !seen[id] {
			delete(r.pods, id)
		}
	}
}

// decision is state.Decide's answer to its input.
type decision struct {
	in  state.Input
	out state.Actions
}
