package state

import (
	"fmt"
	"testing"
)

// table is the specification of Decide: one row for EVERY combination of
// inputs (3 API states x 4 parent states x running x checkpoint x static = 96).
// TestDecideCoversEveryCombination fails if a row is missing or duplicated.
//
// Columns: API (reach = reachable and synced; unreach = unreachable for less
// than the grace period; grace = unreachable for at least the grace period),
// parent as last reported by the API (unknown, present, absent = gone for
// less than the grace period, gone = absent for at least the grace period),
// parent running locally, checkpoint on disk, static copy in the manifest
// directory, expected actions.
var table = []tableRow{
	{"reach", "unknown", 0, 0, 0, "none"},
	{"reach", "unknown", 0, 0, 1, "remove-static"},
	{"reach", "unknown", 0, 1, 0, "none"},
	{"reach", "unknown", 0, 1, 1, "remove-static"},
	{"reach", "unknown", 1, 0, 0, "none"},
	{"reach", "unknown", 1, 0, 1, "remove-static"},
	{"reach", "unknown", 1, 1, 0, "none"},
	{"reach", "unknown", 1, 1, 1, "remove-static"},
	{"reach", "present", 0, 0, 0, "none"},
	{"reach", "present", 0, 0, 1, "remove-static"},
	{"reach", "present", 0, 1, 0, "none"},
	{"reach", "present", 0, 1, 1, "remove-static"},
	{"reach", "present", 1, 0, 0, "save"},
	{"reach", "present", 1, 0, 1, "save,remove-static"},
	{"reach", "present", 1, 1, 0, "save"},
	{"reach", "present", 1, 1, 1, "save,remove-static"},
	{"reach", "absent", 0, 0, 0, "none"},
	{"reach", "absent", 0, 0, 1, "remove-static"},
	{"reach", "absent", 0, 1, 0, "none"},
	{"reach", "absent", 0, 1, 1, "remove-static"},
	{"reach", "absent", 1, 0, 0, "none"},
	{"reach", "absent", 1, 0, 1, "remove-static"},
	{"reach", "absent", 1, 1, 0, "none"},
	{"reach", "absent", 1, 1, 1, "remove-static"},
	{"reach", "gone", 0, 0, 0, "none"},
	{"reach", "gone", 0, 0, 1, "release"},
	{"reach", "gone", 0, 1, 0, "release"},
	{"reach", "gone", 0, 1, 1, "release"},
	{"reach", "gone", 1, 0, 0, "none"},
	{"reach", "gone", 1, 0, 1, "release"},
	{"reach", "gone", 1, 1, 0, "release"},
	{"reach", "gone", 1, 1, 1, "release"},
	{"unreach", "unknown", 0, 0, 0, "none"},
	{"unreach", "unknown", 0, 0, 1, "none"},
	{"unreach", "unknown", 0, 1, 0, "none"},
	{"unreach", "unknown", 0, 1, 1, "none"},
	{"unreach", "unknown", 1, 0, 0, "none"},
	{"unreach", "unknown", 1, 0, 1, "remove-static"},
	{"unreach", "unknown", 1, 1, 0, "none"},
	{"unreach", "unknown", 1, 1, 1, "remove-static"},
	{"unreach", "present", 0, 0, 0, "none"},
	{"unreach", "present", 0, 0, 1, "none"},
	{"unreach", "present", 0, 1, 0, "none"},
	{"unreach", "present", 0, 1, 1, "none"},
	{"unreach", "present", 1, 0, 0, "none"},
	{"unreach", "present", 1, 0, 1, "remove-static"},
	{"unreach", "present", 1, 1, 0, "none"},
	{"unreach", "present", 1, 1, 1, "remove-static"},
	{"unreach", "absent", 0, 0, 0, "none"},
	{"unreach", "absent", 0, 0, 1, "none"},
	{"unreach", "absent", 0, 1, 0, "none"},
	{"unreach", "absent", 0, 1, 1, "none"},
	{"unreach", "absent", 1, 0, 0, "none"},
	{"unreach", "absent", 1, 0, 1, "remove-static"},
	{"unreach", "absent", 1, 1, 0, "none"},
	{"unreach", "absent", 1, 1, 1, "remove-static"},
	{"unreach", "gone", 0, 0, 0, "none"},
	{"unreach", "gone", 0, 0, 1, "none"},
	{"unreach", "gone", 0, 1, 0, "none"},
	{"unreach", "gone", 0, 1, 1, "none"},
	{"unreach", "gone", 1, 0, 0, "none"},
	{"unreach", "gone", 1, 0, 1, "remove-static"},
	{"unreach", "gone", 1, 1, 0, "none"},
	{"unreach", "gone", 1, 1, 1, "remove-static"},
	{"grace", "unknown", 0, 0, 0, "none"},
	{"grace", "unknown", 0, 0, 1, "none"},
	{"grace", "unknown", 0, 1, 0, "restore"},
	{"grace", "unknown", 0, 1, 1, "none"},
	{"grace", "unknown", 1, 0, 0, "none"},
	{"grace", "unknown", 1, 0, 1, "remove-static"},
	{"grace", "unknown", 1, 1, 0, "none"},
	{"grace", "unknown", 1, 1, 1, "remove-static"},
	{"grace", "present", 0, 0, 0, "none"},
	{"grace", "present", 0, 0, 1, "none"},
	{"grace", "present", 0, 1, 0, "restore"},
	{"grace", "present", 0, 1, 1, "none"},
	{"grace", "present", 1, 0, 0, "none"},
	{"grace", "present", 1, 0, 1, "remove-static"},
	{"grace", "present", 1, 1, 0, "none"},
	{"grace", "present", 1, 1, 1, "remove-static"},
	{"grace", "absent", 0, 0, 0, "none"},
	{"grace", "absent", 0, 0, 1, "none"},
	{"grace", "absent", 0, 1, 0, "none"},
	{"grace", "absent", 0, 1, 1, "none"},
	{"grace", "absent", 1, 0, 0, "none"},
	{"grace", "absent", 1, 0, 1, "remove-static"},
	{"grace", "absent", 1, 1, 0, "none"},
	{"grace", "absent", 1, 1, 1, "remove-static"},
	{"grace", "gone", 0, 0, 0, "none"},
	{"grace", "gone", 0, 0, 1, "none"},
	{"grace", "gone", 0, 1, 0, "none"},
	{"grace", "gone", 0, 1, 1, "none"},
	{"grace", "gone", 1, 0, 0, "none"},
	{"grace", "gone", 1, 0, 1, "remove-static"},
	{"grace", "gone", 1, 1, 0, "none"},
	{"grace", "gone", 1, 1, 1, "remove-static"},
}

var apiNames = map[string]API{"reach": APIReachable, "unreach": APIUnreachable, "grace": APIUnreachableForGrace}
var parentNames = map[string]Parent{"unknown": ParentUnknown, "present": ParentPresent, "absent": ParentAbsent, "gone": ParentAbsentForGrace}

func (tc tableRow) input(t *testing.T) Input {
	t.Helper()
	api, ok := apiNames[tc.api]
	if !ok {
		t.Fatalf("bad api %q", tc.api)
	}
	parent, ok := parentNames[tc.parent]
	if !ok {
		t.Fatalf("bad parent %q", tc.parent)
	}
	return Input{API: api, Parent: parent, Running: tc.running == 1, Checkpoint: tc.ckpt == 1, Static: tc.static == 1}
}

type tableRow struct {
	api, parent           string
	running, ckpt, static int
	want                  string
}

func TestDecide(t *testing.T) {
	for _, tc := range table {
		in := tc.input(t)
		t.Run(in.String(), func(t *testing.T) {
			if got := Decide(in).String(); got != tc.want {
				t.Errorf("Decide(%s) = %s, want %s", in, got, tc.want)
			}
		})
	}
}

func allInputs() []Input {
	var all []Input
	for _, api := range APIStates {
		for _, p := range ParentStates {
			for _, run := range []bool{false, true} {
				for _, ck := range []bool{false, true} {
					for _, st := range []bool{false, true} {
						all = append(all, Input{API: api, Parent: p, Running: run, Checkpoint: ck, Static: st})
					}
				}
			}
		}
	}
	return all
}

func TestDecideCoversEveryCombination(t *testing.T) {
	seen := map[Input]int{}
	for _, tc := range table {
		seen[tc.input(t)]++
	}
	all := allInputs()
	if len(all) != 96 {
		t.Fatalf("input space has %d combinations, want 96", len(all))
	}
	for _, in := range all {
		switch seen[in] {
		case 1:
		case 0:
			t.Errorf("table has no row for %s", in)
		default:
			t.Errorf("table has %d rows for %s", seen[in], in)
		}
	}
	if len(table) != len(all) {
		t.Errorf("table has %d rows, want %d", len(table), len(all))
	}
}

// TestDecideSafety checks the promises the daemon makes, over every input.
func TestDecideSafety(t *testing.T) {
	for _, in := range allInputs() {
		a := Decide(in)
		name := fmt.Sprintf("%s -> %s", in, a)
		if a.Release && in.API != APIReachable {
			t.Errorf("%s: released while the API server is not reachable", name)
		}
		if a.Release && in.Parent != ParentAbsentForGrace {
			t.Errorf("%s: released before the parent was gone for the grace period", name)
		}
		if a.Release && (a.Save || a.Restore || a.RemoveStatic) {
			t.Errorf("%s: release combined with other actions", name)
		}
		if a.Restore && in.API != APIUnreachableForGrace {
			t.Errorf("%s: restored before the API server was away for the grace period", name)
		}
		if a.Restore && (in.Running || in.Static || !in.Checkpoint) {
			t.Errorf("%s: restored although running, already restored or nothing saved", name)
		}
		if a.Restore && a.RemoveStatic {
			t.Errorf("%s: restore and remove at once", name)
		}
		if a.RemoveStatic && !in.Static {
			t.Errorf("%s: removing a static copy that is not there", name)
		}
		if a.Save && (in.API != APIReachable || in.Parent != ParentPresent || !in.Running) {
			t.Errorf("%s: saved a pod that is not bound here and running", name)
		}
	}
}
