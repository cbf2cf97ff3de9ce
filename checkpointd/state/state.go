// Package state holds checkpointd's decision table: what to do with one pod
// identity, given what the API server, the container runtime and the local
// disk say about it. Decide is a pure function; the reconcile loop gathers
// the inputs, calls it, and carries out the actions.
//
// The table, in words:
//
//   - Save: the API server is reachable, the parent pod is bound to this node
//     and opted in, and it runs locally. The checkpoint is (re)written when its
//     content changed, so spec changes reach the checkpoint.
//   - Restore: the API server has been unreachable for the grace period, a
//     checkpoint exists, the parent does not run locally, no static copy is
//     present, and the last thing the API said about the parent was not
//     "gone" (it is Present, or Unknown because the daemon started during the
//     outage, e.g. after a reboot).
//   - RemoveStatic (hand-back): a static copy is present and either the API
//     server is reachable (it is the authority again: the parent either
//     returns and needs its IP, or is gone and must not be resurrected), or
//     the parent itself runs locally.
//   - Release: the API server is reachable and has said for the whole grace
//     period that the parent is gone from this node; the static copy, the
//     checkpoint and the parent's IP reservation are all dropped. Nothing is
//     ever released while the API server is unreachable: a transient API
//     error never deletes anything.
package state

import (
	"fmt"
	"strings"
)

// API is what checkpointd knows about the API server's reachability.
type API int

const (
	// APIReachable: the last probe succeeded and the pod watch has synced.
	APIReachable API = iota
	// APIUnreachable: the API server has been unreachable for less than the grace period.
	APIUnreachable
	// APIUnreachableForGrace: the API server has been unreachable for at least the grace period
	// (counted from the daemon's start when it was never reached).
	APIUnreachableForGrace
)

// APIStates lists every API value, for tests that walk the whole table.
var APIStates = []API{APIReachable, APIUnreachable, APIUnreachableForGrace}

func (a API) String() string {
	switch a {
	case APIReachable:
		return "reachable"
	case APIUnreachable:
		return "unreachable"
	case APIUnreachableForGrace:
		return "unreachable-for-grace"
	}
	return fmt.Sprintf("API(%d)", int(a))
}

// Parent is the last thing the API server said about the parent pod.
type Parent int

const (
	// ParentUnknown: the API has not been heard from since the daemon started.
	ParentUnknown Parent = iota
	// ParentPresent: the pod exists, is bound to this node, opted in, not terminating or finished.
	ParentPresent
	// ParentAbsent: the API said the pod is not (or no longer) a checkpoint candidate here,
	// for less than the grace period.
	ParentAbsent
	// ParentAbsentForGrace: the API has said so for at least the grace period.
	ParentAbsentForGrace
)

// ParentStates lists every Parent value.
var ParentStates = []Parent{ParentUnknown, ParentPresent, ParentAbsent, ParentAbsentForGrace}

func (p Parent) String() string {
	switch p {
	case ParentUnknown:
		return "unknown"
	case ParentPresent:
		return "present"
	case ParentAbsent:
		return "absent"
	case ParentAbsentForGrace:
		return "absent-for-grace"
	}
	return fmt.Sprintf("Parent(%d)", int(p))
}

// Input is everything Decide looks at for one pod identity.
type Input struct {
	API    API
	Parent Parent
	// Running: the parent pod (not our static copy) has a ready sandbox in the container runtime.
	Running bool
	// Checkpoint: a valid checkpoint record exists on disk.
	Checkpoint bool
	// Static: our static copy's manifest is in the kubelet's static pod directory.
	Static bool
}

func (in Input) String() string {
	return fmt.Sprintf("api=%s parent=%s running=%t checkpoint=%t static=%t",
		in.API, in.Parent, in.Running, in.Checkpoint, in.Static)
}

// Actions are the steps the reconcile loop must take for one identity.
type Actions struct {
	// Save (or update) the checkpoint from the parent pod.
	Save bool
	// Restore: write the static copy's manifest.
	Restore bool
	// RemoveStatic: delete the static copy's manifest (hand the pod back to the API).
	RemoveStatic bool
	// Release: the parent is gone for good: delete the static copy, the checkpoint
	// and the parent's IP reservation.
	Release bool
}

// None reports whether no action is needed.
func (a Actions) None() bool { return a == Actions{} }

func (a Actions) String() string {
	var s []string
	if a.Save {
		s = append(s, "save")
	}
	if a.Restore {
		s = append(s, "restore")
	}
	if a.RemoveStatic {
		s = append(s, "remove-static")
	}
	if a.Release {
		s = append(s, "release")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// Decide returns the actions for one identity.
func Decide(in Input) Actions {
	var a Actions
	reachable := in.API == APIReachable
	switch {
	case reachable && in.Parent == ParentAbsentForGrace:
		// Gone for good. Release only what exists; nothing to do otherwise.
		a.Release = in.Checkpoint || in.Static
		return a
	case reachable && in.Parent == ParentPresent && in.Running:
		a.Save = true
	}
	if in.Static && (reachable || in.Running) {
		a.RemoveStatic = true
	}
	if in.API == APIUnreachableForGrace && in.Checkpoint && !in.Running && !in.Static &&
		(in.Parent == ParentPresent || in.Parent == ParentUnknown) {
		a.Restore = true
	}
	return a
}
