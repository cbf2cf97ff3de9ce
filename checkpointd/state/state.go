// Package state holds checkpointd's decision table: what to do with one pod
// identity, given what the API server, the container runtime, the operator's
// policy and the local disk say about it. Decide is a pure function; the
// reconcile loop observes the inputs once per pass, calls it, and carries out
// the actions.
//
// The table, in words (docs/DESIGN.md, "checkpointd: how it decides", has it as a table):
//
//   - Save: the API server answers, the parent pod is bound to this node, opted
//     in, allowed by the operator's policy, and runs locally.
//   - Refuse: the same, but the policy refuses it (reported: log, metric, Event).
//   - Restore: the API server has been unreachable for the grace period, a
//     checkpoint of an allowed pod exists, the parent does not run, the kubelet
//     cannot know it (the API server has not listed it as bound here during
//     this boot: after a reboot the kubelet has no API pods; during an outage
//     without a reboot it still runs, restarts or deliberately stops the pods it
//     knows), no copy's manifest is in place, the last word of the API server
//     was not "gone", and the pod's controller cannot have replaced it
//     elsewhere yet (ReplacementOf against the time since the node's last
//     API contact). A copy that still runs without its manifest (checkpointd
//     restarted during the outage) gets the same manifest back: the kubelet
//     takes it for the same pod.
//   - WriteFiles: write the copy's secret/configMap files: with a restore,
//     unless a running copy already has them (new directories would hide
//     nothing from it but replace what it mounted); or when the copy's
//     manifest stays in place and its files are missing (a reboot emptied
//     the tmpfs).
//   - RemoveCopy: a static copy is in place and one of: the policy refuses the
//     pod, its checkpoint is gone, the parent itself runs, or the API server has
//     been reachable for the stability period (the parent is bound here and gets
//     its pod and IP back, or it is not and must not be resurrected). Never
//     because the API server is unreachable or has just come back.
//   - RemoveFiles: the copy's secret/configMap files remain but neither its
//     manifest nor a running sandbox of it does (files go after the sandbox).
//   - DropCheckpoint: only when the API server, reachable for the stability
//     period, has said for the grace period that the parent is gone. A policy
//     refusal blocks restores but deletes nothing (the policy may be a
//     mistake made during the outage the checkpoint is for; `checkpointd
//     cleanup --all` is the operator's way). The IP reservation is never
//     touched: it keeps the pod's own duration. A transient API error never
//     deletes anything.
package state

import (
	"fmt"
	"strings"
)

// API is what checkpointd knows about the API server's reachability.
type API int

const (
	// APIReachable: the API server answers, the pod watch has synced, and both
	// have held for the stability period.
	APIReachable API = iota
	// APIRecovering: the API server answers and the watch has synced, for less
	// than the stability period (a flapping control plane stays here).
	APIRecovering
	// APIUnreachable: the API server has been unreachable for less than the grace period.
	APIUnreachable
	// APIUnreachableForGrace: unreachable for at least the grace period
	// (counted from the daemon's start when it was never reached).
	APIUnreachableForGrace
)

// APIStates lists every API value, for tests that walk the whole table.
var APIStates = []API{APIReachable, APIRecovering, APIUnreachable, APIUnreachableForGrace}

func (a API) String() string {
	switch a {
	case APIReachable:
		return "reachable"
	case APIRecovering:
		return "recovering"
	case APIUnreachable:
		return "unreachable"
	case APIUnreachableForGrace:
		return "unreachable-for-grace"
	}
	return fmt.Sprintf("API(%d)", int(a))
}

// Up reports whether the API server answers now (reachable or recovering):
// the one test of "the API server answers" every step uses.
func (a API) Up() bool { return a == APIReachable || a == APIRecovering }

// Parent is the last thing the API server said about the parent pod.
type Parent int

const (
	// ParentUnknown: the API has not been heard from since the daemon started.
	ParentUnknown Parent = iota
	// ParentPresent: bound to this node, opted in, neither terminating nor finished.
	ParentPresent
	// ParentAbsent: the API said the pod is not (or no longer) such a pod,
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
	// Allowed: the operator's policy allows checkpointing this pod (judged on
	// the parent's spec when the API has it, else on the checkpoint's).
	Allowed bool
	// Running: the parent pod (not a copy) has a ready sandbox.
	Running bool
	// Known: the API server listed the parent as bound to this node during
	// this boot, so the kubelet knows it too and runs it, or stopped it on
	// purpose (completed, evicted).
	Known bool
	// Checkpoint: a valid checkpoint record exists on disk.
	Checkpoint bool
	// Static: our static copy's manifest is in the kubelet's static pod directory.
	Static bool
	// CopyRunning: a sandbox of our static copy is ready (its DEL is still to come).
	CopyRunning bool
	// Files: the copy's secret/configMap files exist on disk.
	Files bool
	// Replaced: the parent's controller may have started a replacement
	// elsewhere: ReplacementOf(the saved pod) is not Never and the time since
	// the node's last API contact (kept across reboots; unknown counts as
	// forever) has reached its After.
	Replaced bool
}

func (in Input) String() string {
	return fmt.Sprintf("api=%s parent=%s allowed=%t running=%t known=%t checkpoint=%t static=%t copyRunning=%t files=%t replaced=%t",
		in.API, in.Parent, in.Allowed, in.Running, in.Known, in.Checkpoint, in.Static, in.CopyRunning, in.Files, in.Replaced)
}

// Why says why a static copy is removed.
type Why string

// Reasons for RemoveCopy.
const (
	WhyRefused       Why = "refused by the operator's policy"
	WhyNoCheckpoint  Why = "its checkpoint is gone"
	WhyParentRuns    Why = "the parent pod runs on the node again"
	WhyHandBack      Why = "API server reachable for the stability period and the parent is bound here: handing the pod and its IP back"
	WhyParentNotHere Why = "API server reachable for the stability period and the parent is not bound here (deleted, moved or finished): not resurrecting it"
)

// Actions are the steps the reconcile loop takes for one identity.
type Actions struct {
	// Save (or update) the checkpoint from the parent pod.
	Save bool
	// Refuse: report that the policy refuses the parent.
	Refuse bool
	// Restore: write the static copy's manifest.
	Restore bool
	// WriteFiles: write the copy's secret/configMap files (before its manifest).
	WriteFiles bool
	// RemoveCopy: delete the static copy's manifest, for reason Why.
	RemoveCopy bool
	Why        Why
	// RemoveFiles: delete the copy's secret/configMap files.
	RemoveFiles bool
	// DropCheckpoint: delete the checkpoint (and the parent's absence mark).
	DropCheckpoint bool
}

func (a Actions) String() string {
	var s []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{a.Save, "save"}, {a.Refuse, "refuse"}, {a.Restore, "restore"}, {a.WriteFiles, "write-files"}, {a.RemoveCopy, "remove-copy"},
		{a.RemoveFiles, "remove-files"}, {a.DropCheckpoint, "drop-checkpoint"},
	} {
		if f.on {
			s = append(s, f.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// Decide returns the actions for one identity.
func Decide(in Input) Actions {
	var a Actions
	stable := in.API == APIReachable

	if in.Parent == ParentPresent && in.API.Up() {
		a.Refuse = !in.Allowed
		a.Save = in.Allowed && in.Running
	}

	a.DropCheckpoint = in.Checkpoint && stable && in.Parent == ParentAbsentForGrace

	if in.Static {
		switch {
		case !in.Allowed:
			a.Why = WhyRefused
		case !in.Checkpoint:
			a.Why = WhyNoCheckpoint
		case in.Running:
			a.Why = WhyParentRuns
		case stable && in.Parent == ParentPresent:
			a.Why = WhyHandBack
		case stable:
			a.Why = WhyParentNotHere
		}
		a.RemoveCopy = a.Why != ""
	}

	a.Restore = in.API == APIUnreachableForGrace && in.Checkpoint && in.Allowed &&
		!in.Running && !in.Known && !in.Static && !in.Replaced &&
		(in.Parent == ParentPresent || in.Parent == ParentUnknown)

	a.WriteFiles = (a.Restore && !(in.CopyRunning && in.Files)) ||
		(in.Static && !a.RemoveCopy && in.Checkpoint && !in.Files)
	a.RemoveFiles = in.Files && !in.Static && !in.CopyRunning && !a.Restore
	return a
}
