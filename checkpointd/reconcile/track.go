package reconcile

import (
	"context"
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/checkpointd/state"
)

// track records what the API server says, while it answers: that the node
// is in contact (kept across reboots: how long a later outage has lasted),
// which parents are present or absent (an absence survives restarts as a
// mark in the checkpoint directory, so a reboot never resurrects a pod the
// API server said is gone), and which pods it lists as bound here this boot
// (the kubelet knows those).
func (r *Reconciler) track(s *snapshot) {
	if !s.api.Up() {
		return
	}
	if r.cfg.Contact != nil {
		if err := r.cfg.Contact.Contact(s.now); err != nil {
			// An old contact time only makes restores more careful.
			r.problem(checkpoint.ID{}, "contact", "cannot record the API contact", err)
		} else {
			r.solved(checkpoint.ID{}, "contact")
		}
	}
	bound := make([]string, len(s.bound))
	for i, id := range s.bound {
		bound[i] = id.String()
	}
	if err := r.cfg.Boot.MarkSeen(bound...); err != nil {
		// Without the list a later outage could restore a pod the kubelet
		// still knows; restores are held back until it is written.
		r.bootUnrecorded = true
		r.problem(checkpoint.ID{}, "boot", "cannot record the pods the kubelet knows this boot; restores are held back", err)
	} else {
		r.bootUnrecorded = false
		r.solved(checkpoint.ID{}, "boot")
	}
	for _, id := range s.ids() {
		m := r.mem(id)
		if _, ok := s.parents[id]; ok {
			if !m.heard || !m.present || m.staleMark {
				err := r.cfg.Store.ClearAbsent(id)
				if m.staleMark = err != nil; m.staleMark {
					// A stale mark only holds restores back; retried next pass.
					r.problem(id, "absence", "cannot clear the parent's absence mark", err)
				} else {
					r.solved(id, "absence")
				}
			}
			m.heard, m.present, m.absentSince = true, true, time.Time{}
			continue
		}
		m.heard, m.present = true, false
		if m.absentSince.IsZero() {
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
			m.absentSince = since
		}
	}
}

// parentState is the last word of the API server about id's parent.
func (r *Reconciler) parentState(s *snapshot, id checkpoint.ID) state.Parent {
	m := r.mem(id)
	since := m.absentSince
	switch {
	case m.heard && m.present:
		return state.ParentPresent
	case !m.heard:
		// Not heard from the API since this process started: a mark left by
		// an earlier run still counts (the pod was deleted, then the node rebooted).
		var absent bool
		if since, absent = r.cfg.Store.AbsentSince(id); !absent {
			return state.ParentUnknown
		}
	}
	if since.IsZero() || s.now.Sub(since) < r.cfg.Grace {
		return state.ParentAbsent
	}
	return state.ParentAbsentForGrace
}

// replaced reports whether id's controller may have replaced it elsewhere
// by now (state.ReplacementOf of the saved pod against the time since the
// node's last API contact; unknown counts as forever).
func (r *Reconciler) replaced(s *snapshot, id checkpoint.ID) bool {
	rec := s.records[id]
	if rec == nil {
		return false
	}
	rep := state.ReplacementOf(rec.Pod)
	if rep.Never {
		return false
	}
	var offline time.Duration
	known := false
	if r.cfg.Contact != nil {
		offline, known = r.cfg.Contact.Since(s.now)
	}
	return !known || offline >= rep.After
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

// pod decides and acts for one identity: exactly the actions state.Decide
// returns. Its errors stay its own.
func (r *Reconciler) pod(ctx context.Context, s *snapshot, id checkpoint.ID) {
	v := r.verdict(s, id)
	in := state.Input{
		API:         s.api,
		Parent:      r.parentState(s, id),
		Allowed:     v.Allowed,
		Running:     s.running[id],
		Known:       r.cfg.Boot.Seen(id.String()) || r.bootUnrecorded,
		Checkpoint:  s.records[id] != nil,
		Static:      s.copies[id],
		CopyRunning: s.copyRunning[id],
		Files:       s.files[id],
		Replaced:    r.replaced(s, id),
	}
	a := state.Decide(in)
	m := r.mem(id)
	if d := (decision{in, a}); m.decided == nil || *m.decided != d {
		m.decided = &d
		r.cfg.Log.Debug("decision", "pod", id.String(), "input", in.String(), "actions", a.String())
	}
	if a.RemoveCopy {
		r.removeCopy(s, id, a.Why)
	}
	if a.DropCheckpoint {
		r.dropCheckpoint(s, id)
	}
	if a.Refuse {
		r.refuse(s, id, v)
	}
	if a.Save {
		r.save(ctx, s, id)
	}
	if a.WriteFiles || a.Restore {
		r.restore(s, id, a, in.CopyRunning)
	}
	if a.RemoveFiles {
		r.removeFiles(id)
	}
}
