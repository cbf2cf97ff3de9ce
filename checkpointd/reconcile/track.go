package reconcile

import (
	"context"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// track records what the API server says, while it answers: which parents are
// present or absent (an absence survives restarts as a mark in the checkpoint
// directory, so a reboot never resurrects a pod the API server said is gone),
// and which pods it lists as bound here this boot (the kubelet knows those).
func (r *Reconciler) track(s *snapshot) {
	if s.api != state.APIReachable && s.api != state.APIRecovering {
		return
	}
	bound := make([]string, len(s.bound))
	for i, id := range s.bound {
		bound[i] = id.String()
	}
	if err := r.cfg.Boot.MarkSeen(bound...); err != nil {
		// Without the list a later outage could restore a pod the kubelet
		// still knows; restores are held back until it is written (see input).
		r.problem(checkpoint.ID{}, "boot", "cannot record the pods the kubelet knows this boot; restores are held back", err)
	} else {
		r.solved(checkpoint.ID{}, "boot")
	}
	for _, id := range s.ids() {
		if _, ok := s.parents[id]; ok {
			_, failed := r.reported[reportKey(id, "absence")]
			if said, ok := r.said[id]; !ok || !said || failed {
				if err := r.cfg.Store.ClearAbsent(id); err != nil {
					// A stale mark only holds restores back; retried next pass.
					r.problem(id, "absence", "cannot clear the parent's absence mark", err)
				} else {
					r.solved(id, "absence")
				}
			}
			r.said[id] = true
			delete(r.absentSince, id)
			continue
		}
		r.said[id] = false
		if _, ok := r.absentSince[id]; !ok {
			since, stored := r.cfg.Store.AbsentSince(id)
			// Only a checkpoint needs the mark on disk (it is removed with
			// the checkpoint); an identity known only by a leftover copy or
			// its files is tracked in memory.
			if !stored && s.records[id] != nil {
				if err := r.cfg.Store.MarkAbsent(id, s.now); err != nil {
					r.problem(id, "absence", "cannot record that the API server reports the parent gone", err)
				}
			}
			if !stored {
				since = s.now
			}
			r.absentSince[id] = since
		}
	}
}

// parentState is the last word of the API server about id's parent.
func (r *Reconciler) parentState(s *snapshot, id checkpoint.ID) state.Parent {
	since, absent := r.absentSince[id]
	switch said, heard := r.said[id]; {
	case heard && said:
		return state.ParentPresent
	case !heard:
		// Not heard from the API since this process started: a mark left by
		// an earlier run still counts (the pod was deleted, then the node rebooted).
		if since, absent = r.cfg.Store.AbsentSince(id); !absent {
			return state.ParentUnknown
		}
	}
	if !absent || s.now.Sub(since) < r.cfg.Grace {
		return state.ParentAbsent
	}
	return state.ParentAbsentForGrace
}

// verdict judges id with the operator's policy: on the parent's spec when
// the API server has it, else on the checkpoint's.
func (r *Reconciler) verdict(s *snapshot, id checkpoint.ID) policy.Verdict {
	if p := s.parents[id]; p != nil {
		return r.cfg.Policy.Evaluate(p)
	}
	if rec := s.records[id]; rec != nil {
		return r.cfg.Policy.Evaluate(rec.Pod)
	}
	return policy.Verdict{Allowed: true}
}

// pod decides and acts for one identity. Its errors stay its own.
func (r *Reconciler) pod(ctx context.Context, s *snapshot, id checkpoint.ID) {
	v := r.verdict(s, id)
	in := state.Input{
		API:         s.api,
		Parent:      r.parentState(s, id),
		Allowed:     v.Allowed,
		Running:     s.running[id],
		Known:       r.cfg.Boot.Seen(id.String()) || r.heldBack(),
		Checkpoint:  s.records[id] != nil,
		Static:      s.copies[id],
		CopyRunning: s.copyRunning[id],
		Files:       s.files[id],
	}
	a := state.Decide(in)
	if d := in.String() + " -> " + a.String(); r.decided[id] != d {
		r.decided[id] = d
		r.cfg.Log.Debug("decision", "pod", id.String(), "input", in.String(), "actions", a.String())
	}
	if a.RemoveCopy {
		r.removeCopy(s, id, a.Why)
	}
	if a.DropCheckpoint {
		r.dropCheckpoint(s, id, in, v)
	}
	if a.Refuse {
		r.refuse(s, id, v)
	}
	if a.Save {
		r.save(ctx, s, id)
	}
	if in.Static && !a.RemoveCopy && in.Checkpoint {
		r.ensureFiles(s, id)
	}
	if a.Restore {
		r.restore(s, id)
	}
	if a.RemoveFiles {
		r.removeFiles(id)
	}
}

// heldBack reports whether restores must wait: the list of pods the kubelet
// knows this boot could not be written.
func (r *Reconciler) heldBack() bool {
	_, failing := r.reported[reportKey(checkpoint.ID{}, "boot")]
	return failing
}
