package rebuild

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// allTakeBacks walks the whole input space of decide: 2^6 flags (a sandbox
// holds the identity, the entry disowned, claimed later elsewhere, in the
// node's ranges, in its pod CIDRs, a re-installed node) x 3 ends (running
// "-", a reservation still to end, one over) x 3 known durations (none,
// 30 minutes, 30 days: beyond the maximum) x 2 starts (5 minutes ago, 8
// days ago) = 1,152 combinations, with reservation.maxDuration 7 days.
func allTakeBacks() []takeBack {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var all []takeBack
	for bits := range 1 << 6 {
		b := func(i int) bool { return bits&(1<<i) != 0 }
		for _, until := range []time.Time{{}, now.Add(20 * time.Minute), now.Add(-time.Minute)} {
			for _, known := range []time.Duration{0, 30 * time.Minute, 30 * 24 * time.Hour} {
				for _, start := range []time.Time{now.Add(-5 * time.Minute), now.Add(-8 * 24 * time.Hour)} {
					in := takeBack{Running: b(0), Disowned: b(1), InRanges: b(3), InPodCIDR: b(4), Reinstalled: b(5),
						Until: until, Known: known, MaxDuration: 7 * 24 * time.Hour, Start: start, Now: now}
					if b(2) {
						in.LaterBy = "node2"
					}
					all = append(all, in)
				}
			}
		}
	}
	return all
}

func (in takeBack) String() string {
	until := "-"
	if !in.Until.IsZero() {
		until = in.Until.Sub(in.Now).String()
	}
	return fmt.Sprintf("{running %t disowned %t later %q ranges %t podCIDR %t until %s known %s reinstalled %t start %s}",
		in.Running, in.Disowned, in.LaterBy, in.InRanges, in.InPodCIDR, until, in.Known, in.Reinstalled, in.Now.Sub(in.Start))
}

// wantTakeBack is the re-imaged node's rule, written from the guide
// (docs/guides/node-lost.md) rather than from
// decide: an entry of the node is taken back (to its until; a pod that ran
// there, for its own duration where known, else the network's
// reservation.maxDuration on a re-installed node) unless a sandbox holds
// its identity, its address is outside the node's networks or pod CIDRs,
// another node claimed it later, or it is an earlier Node object's; and
// never past its end.
func wantTakeBack(in takeBack) (time.Time, bool) {
	if in.Running || in.Disowned || in.LaterBy != "" || !in.InRanges || !in.InPodCIDR {
		return time.Time{}, false
	}
	end := in.Until
	if end.IsZero() {
		var d time.Duration
		switch {
		case in.Known > 0:
			d = min(in.Known, in.MaxDuration)
		case in.Reinstalled:
			d = in.MaxDuration
		default:
			return time.Time{}, false // a damaged store's "-" entry with no checkpoint: its end is unknown
		}
		end = in.Start.Add(d)
	}
	if !in.Now.Before(end) {
		return time.Time{}, false
	}
	return end, true
}

func TestTakeBackInputSpace(t *testing.T) {
	seen := map[string]bool{}
	for _, in := range allTakeBacks() {
		seen[in.String()] = true
	}
	if len(seen) != 1152 {
		t.Fatalf("input space has %d distinct combinations, want 1152", len(seen))
	}
}

func TestDecideFollowsTheIssueForEveryInput(t *testing.T) {
	taken := 0
	for _, in := range allTakeBacks() {
		until, why := decide(in)
		want, ok := wantTakeBack(in)
		switch {
		case ok != !until.IsZero() || !until.Equal(want):
			t.Errorf("decide(%s) = %s %q, want taken %t until %s", in, until, why, ok, want)
		case ok && why != "":
			t.Errorf("decide(%s): taken back with a reason %q", in, why)
		}
		if ok {
			taken++
		}
	}
	t.Logf("%d of %d combinations taken back", taken, len(allTakeBacks()))
}

// TestDecideSafety states each promise on its own, over every input.
func TestDecideSafety(t *testing.T) {
	for _, in := range allTakeBacks() {
		until, why := decide(in)
		name := in.String()
		if until.IsZero() {
			// Not taken back: said why, unless there was nothing to keep
			// (the identity's sandbox holds it, or the reservation is over).
			kept := !in.Disowned && in.LaterBy == "" && in.InRanges && in.InPodCIDR
			unknownEnd := in.Until.IsZero() && in.Known == 0 && !in.Reinstalled
			if silent := in.Running || kept && !unknownEnd; silent != (why == "") {
				t.Errorf("%s: not taken back, reason %q", name, why)
			}
			continue
		}
		switch {
		case in.Disowned:
			t.Errorf("%s: took back an earlier Node's entry", name)
		case in.LaterBy != "":
			t.Errorf("%s: took back an identity another node claimed later", name)
		case !in.InRanges || !in.InPodCIDR:
			t.Errorf("%s: took back an address the node does not hand out", name)
		case in.Running:
			t.Errorf("%s: reserved an identity a sandbox holds", name)
		case !until.After(in.Now):
			t.Errorf("%s: a reservation already over (%s)", name, until)
		case !in.Until.IsZero() && until.After(in.Until):
			t.Errorf("%s: kept past the entry's end", name)
		case in.Until.IsZero() && until.After(in.Start.Add(in.MaxDuration)):
			t.Errorf("%s: kept past reservation.maxDuration from the start", name)
		case in.Until.IsZero() && !in.Reinstalled && in.Known == 0:
			t.Errorf("%s: a rebuilt store kept a running entry of unknown duration", name)
		}
	}
}

// TestDecideSituations names a re-imaged node's situations in decide's terms.
func TestDecideSituations(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	max := 7 * 24 * time.Hour
	base := takeBack{InRanges: true, InPodCIDR: true, Reinstalled: true, MaxDuration: max, Start: now.Add(-time.Minute), Now: now}
	with := func(f func(*takeBack)) takeBack { in := base; f(&in); return in }
	for _, tc := range []struct {
		name  string
		in    takeBack
		until time.Time
		why   string
	}{
		{"db-0 ran on the node when it was re-imaged: kept reservation.maxDuration from the node's start", base, base.Start.Add(max), ""},
		{"a deleted pod's reservation: kept to its end", with(func(in *takeBack) { in.Until = now.Add(25 * time.Minute) }), now.Add(25 * time.Minute), ""},
		{"a reservation over while the node was down", with(func(in *takeBack) { in.Until = now.Add(-time.Second) }), time.Time{}, ""},
		{"the pod moved meanwhile and ran elsewhere", with(func(in *takeBack) { in.LaterBy = "node2" }), time.Time{}, "node node2 claimed the identity later"},
		{"the Node was deleted and registered again", with(func(in *takeBack) { in.Disowned = true }), time.Time{}, "earlier Node"},
		{"the node's pod CIDR changed", with(func(in *takeBack) { in.InPodCIDR = false }), time.Time{}, "outside the Node's pod CIDRs"},
		{"no network hands it out", with(func(in *takeBack) { in.InRanges = false }), time.Time{}, "in no range"},
		{"a checkpoint says the pod's own duration", with(func(in *takeBack) { in.Known = 30 * time.Minute }), base.Start.Add(30 * time.Minute), ""},
		{"a damaged store's running entry without a checkpoint", with(func(in *takeBack) { in.Reinstalled = false }), time.Time{}, "its end is unknown"},
		{"the pod runs already", with(func(in *takeBack) { in.Running = true }), time.Time{}, ""},
	} {
		until, why := decide(tc.in)
		if !until.Equal(tc.until) || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: decide = %s %q, want %s %q", tc.name, until, why, tc.until, tc.why)
		}
	}
}
