package state

import (
	"fmt"
	"testing"
)

// allInputs walks the whole input space: 4 API states x 4 parent states x 2^8
// flags = 4096 combinations.
func allInputs() []Input {
	var all []Input
	for _, api := range APIStates {
		for _, p := range ParentStates {
			for bits := 0; bits < 1<<8; bits++ {
				b := func(i int) bool { return bits&(1<<i) != 0 }
				all = append(all, Input{API: api, Parent: p, Allowed: b(0), Running: b(1), Known: b(2),
					Checkpoint: b(3), Static: b(4), CopyRunning: b(5), Files: b(6), Replaced: b(7)})
			}
		}
	}
	return all
}

func TestInputSpace(t *testing.T) {
	seen := map[Input]bool{}
	for _, in := range allInputs() {
		seen[in] = true
	}
	if len(seen) != 4096 {
		t.Fatalf("input space has %d distinct combinations, want 4096", len(seen))
	}
}

// spec is the decision table of docs/DESIGN.md ("checkpointd: how it decides"), one predicate per
// action, written from the documentation rather than from Decide. Decide must
// take each action exactly when its predicate holds.
var spec = []struct {
	action string
	when   func(Input) bool
	got    func(Actions) bool
}{
	{"save", func(in Input) bool {
		return (in.API == APIReachable || in.API == APIRecovering) && in.Parent == ParentPresent && in.Allowed && in.Running
	}, func(a Actions) bool { return a.Save }},
	{"refuse", func(in Input) bool {
		return (in.API == APIReachable || in.API == APIRecovering) && in.Parent == ParentPresent && !in.Allowed
	}, func(a Actions) bool { return a.Refuse }},
	{"restore", restores, func(a Actions) bool { return a.Restore }},
	{"write-files", func(in Input) bool {
		return (restores(in) && !(in.CopyRunning && in.Files)) ||
			(in.Static && in.Allowed && in.Checkpoint && !in.Running && in.API != APIReachable && !in.Files)
	}, func(a Actions) bool { return a.WriteFiles }},
	{"remove-copy", func(in Input) bool {
		return in.Static && (!in.Allowed || !in.Checkpoint || in.Running || in.API == APIReachable)
	}, func(a Actions) bool { return a.RemoveCopy }},
	{"remove-files", func(in Input) bool {
		return in.Files && !in.Static && !in.CopyRunning && !restores(in)
	}, func(a Actions) bool { return a.RemoveFiles }},
	{"drop-checkpoint", func(in Input) bool {
		return in.Checkpoint && in.API == APIReachable && in.Parent == ParentAbsentForGrace
	}, func(a Actions) bool { return a.DropCheckpoint }},
}

// restores is the restore row of the table: a copy that runs without its
// manifest gets it back under the same conditions as a new copy.
func restores(in Input) bool {
	return in.API == APIUnreachableForGrace && in.Checkpoint && in.Allowed && !in.Running && !in.Known &&
		!in.Static && !in.Replaced && in.Parent != ParentAbsent && in.Parent != ParentAbsentForGrace
}

func TestDecideFollowsTheTableForEveryInput(t *testing.T) {
	for _, in := range allInputs() {
		a := Decide(in)
		for _, s := range spec {
			if want, got := s.when(in), s.got(a); want != got {
				t.Errorf("Decide(%s) = %s: %s is %t, want %t", in, a, s.action, got, want)
			}
		}
		if a.RemoveCopy != (a.Why != "") {
			t.Errorf("Decide(%s) = %s: remove-copy %t with reason %q", in, a, a.RemoveCopy, a.Why)
		}
	}
}

// TestHandBackOnlyWhenTheParentIsHere: a copy removed while its parent is
// bound here is a hand-back (reconcile posts the hand-back Event and counts
// it); one removed because its parent is gone or elsewhere is not. Both
// remove the copy, so only the reason tells them apart.
func TestHandBackOnlyWhenTheParentIsHere(t *testing.T) {
	handBacks, notHere := 0, 0
	for _, in := range allInputs() {
		a := Decide(in)
		want := in.Static && in.Allowed && in.Checkpoint && !in.Running && in.API == APIReachable && in.Parent == ParentPresent
		if got := a.Why == WhyHandBack; got != want {
			t.Errorf("Decide(%s) = %s (why %q): hand-back %t, want %t", in, a, a.Why, got, want)
		}
		switch a.Why {
		case WhyHandBack:
			handBacks++
		case WhyParentNotHere:
			notHere++
			if in.Parent == ParentPresent {
				t.Errorf("Decide(%s): the parent is bound here, yet %q", in, a.Why)
			}
		}
	}
	if handBacks == 0 || notHere == 0 {
		t.Fatalf("the input space gave %d hand-backs and %d parents not here: the test shows nothing", handBacks, notHere)
	}
}

// TestDecideSafety checks the promises checkpointd makes, over every input,
// each stated on its own (not as the table is).
func TestDecideSafety(t *testing.T) {
	for _, in := range allInputs() {
		a := Decide(in)
		name := fmt.Sprintf("%s -> %s", in, a)
		if in.API != APIReachable && (a.DropCheckpoint || (a.RemoveCopy && in.Allowed && in.Checkpoint && !in.Running)) {
			t.Errorf("%s: deleted something while the API server is unreachable or not yet stable", name)
		}
		if a.DropCheckpoint && !(in.API == APIReachable && in.Parent == ParentAbsentForGrace) {
			t.Errorf("%s: dropped a checkpoint the API server has not confirmed gone", name)
		}
		if a.Restore && in.Replaced {
			t.Errorf("%s: restored a pod its controller may have replaced elsewhere", name)
		}
		if a.WriteFiles && in.CopyRunning && in.Files && !in.Static {
			t.Errorf("%s: replaced the files under a running copy", name)
		}
		if a.WriteFiles && !in.Checkpoint {
			t.Errorf("%s: wrote files without a checkpoint", name)
		}
		if a.Restore && in.Known {
			t.Errorf("%s: restored a pod the kubelet knows (it runs it, or stopped it on purpose)", name)
		}
		if a.Restore && !in.Allowed {
			t.Errorf("%s: restored a pod the operator's policy refuses", name)
		}
		if a.Restore && (in.Running || in.Static || !in.Checkpoint) {
			t.Errorf("%s: restored although running, already restored or nothing saved", name)
		}
		if a.Restore && in.API != APIUnreachableForGrace {
			t.Errorf("%s: restored before the API server was away for the grace period", name)
		}
		if a.Restore && (a.RemoveCopy || a.DropCheckpoint || a.RemoveFiles) {
			t.Errorf("%s: restore combined with a removal", name)
		}
		if a.Save && (a.Refuse || a.DropCheckpoint) {
			t.Errorf("%s: saved and refused or dropped at once", name)
		}
		if a.Save && !(in.API == APIReachable || in.API == APIRecovering) {
			t.Errorf("%s: saved without the API server", name)
		}
		if a.RemoveCopy && !in.Static {
			t.Errorf("%s: removing a copy that is not there", name)
		}
		if a.RemoveFiles && (in.Static || in.CopyRunning) {
			t.Errorf("%s: removed the files of a copy that is in place or still running", name)
		}
	}
}

// TestSituations names checkpointd's situations (docs/DESIGN.md) in the table's terms.
func TestSituations(t *testing.T) {
	base := Input{Allowed: true, Checkpoint: true}
	with := func(f func(*Input)) Input { in := base; f(&in); return in }
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"running pod is saved", with(func(in *Input) { in.API, in.Parent, in.Running, in.Known = APIReachable, ParentPresent, true, true }), "save"},
		{"pod the policy refuses: refused, its checkpoint kept (the API has not said it is gone)", with(func(in *Input) {
			in.API, in.Parent, in.Running, in.Known, in.Allowed = APIReachable, ParentPresent, true, true, false
		}), "refuse"},
		{"reboot with the API away: restored", with(func(in *Input) { in.API = APIUnreachableForGrace }), "restore,write-files"},
		{"reboot after a partition longer than the controller waits: not restored", with(func(in *Input) {
			in.API, in.Replaced = APIUnreachableForGrace, true
		}), "none"},
		{"checkpointd restarted during the outage, copy runs without its manifest: manifest back, files kept", with(func(in *Input) {
			in.API, in.CopyRunning, in.Files = APIUnreachableForGrace, true, true
		}), "restore"},
		{"copy runs without manifest, but its controller may have replaced it: left for the kubelet to stop", with(func(in *Input) {
			in.API, in.CopyRunning, in.Files, in.Replaced = APIUnreachableForGrace, true, true, true
		}), "none"},
		{"reboot emptied the tmpfs, the manifest survived: files rewritten", with(func(in *Input) {
			in.API, in.Static = APIUnreachableForGrace, true
		}), "write-files"},
		{"outage without reboot, pod completed or evicted (kubelet knows it): not restored", with(func(in *Input) {
			in.API, in.Parent, in.Known = APIUnreachableForGrace, ParentPresent, true
		}), "none"},
		{"copy restored, API back but not stable yet: copy stays", with(func(in *Input) {
			in.API, in.Parent, in.Static, in.CopyRunning, in.Files, in.Known = APIRecovering, ParentPresent, true, true, true, true
		}), "none"},
		{"API stable, parent bound here: hand-back", with(func(in *Input) {
			in.API, in.Parent, in.Static, in.CopyRunning, in.Files, in.Known = APIReachable, ParentPresent, true, true, true, true
		}), "remove-copy"},
		{"copy removed, its sandbox still stopping: files stay", with(func(in *Input) {
			in.API, in.Parent, in.CopyRunning, in.Files, in.Known = APIReachable, ParentPresent, true, true, true
		}), "none"},
		{"copy's sandbox gone: files go", with(func(in *Input) {
			in.API, in.Parent, in.Files, in.Known = APIReachable, ParentPresent, true, true
		}), "remove-files"},
		{"parent gone for the grace period: checkpoint dropped, nothing else (the reservation keeps its duration)", with(func(in *Input) {
			in.API, in.Parent = APIReachable, ParentAbsentForGrace
		}), "drop-checkpoint"},
		{"orphaned copy (checkpoint gone) while the API is away: removed", with(func(in *Input) {
			in.API, in.Checkpoint, in.Static = APIUnreachableForGrace, false, true
		}), "remove-copy"},
		{"operator narrowed the policy during the outage: copy's manifest removed, checkpoint kept", with(func(in *Input) {
			in.API, in.Allowed, in.Static, in.CopyRunning, in.Files = APIUnreachableForGrace, false, true, true, true
		}), "remove-copy"},
		{"narrowed policy at a boot during the outage: not restored, nothing deleted", with(func(in *Input) {
			in.API, in.Allowed = APIUnreachableForGrace, false
		}), "none"},
		{"API away, last word was gone: nothing", with(func(in *Input) { in.API, in.Parent = APIUnreachableForGrace, ParentAbsent }), "none"},
	} {
		if got := Decide(tc.in).String(); got != tc.want {
			t.Errorf("%s: Decide(%s) = %s, want %s", tc.name, tc.in, got, tc.want)
		}
	}
}
