package placement

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/reservation"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func rec(ip, ns, name, pod, uid string, state reservation.State, dur time.Duration, at, exp time.Time) reservation.Entry {
	return reservation.Entry{Network: "cbr0", Record: &reservation.Record{IP: netip.MustParseAddr(ip), State: state, UID: uid, PodName: pod,
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, Duration: dur, AllocatedAt: at, ExpiresAt: exp}}
}

// What a node publishes of each kind of record: a running sticky pod
// (no end), a reservation (its end, the latest of its interfaces'), one
// its StatefulSet keeps (held, no end), a keyed identity (its pod), both
// families of one identity in one entry; never a plain pod, a cooling
// address, an expired reservation, or an address the node no longer
// holds.
func TestDesired(t *testing.T) {
	held := rec("10.0.0.5", "db", "db-5", "db-5", "p5", reservation.Reserved, 10*time.Minute, now.Add(-time.Hour), now.Add(-time.Minute))
	held.StatefulSet = &reservation.StatefulSetRef{Name: "db", UID: "s1"}
	entries := []reservation.Entry{
		rec("10.0.0.2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now.Add(-time.Minute+300*time.Millisecond), time.Time{}),
		rec("fd00::2", "db", "db-0", "db-0", "p0", reservation.Allocated, 10*time.Minute, now.Add(-time.Minute), time.Time{}),
		rec("10.0.0.3", "db", "db-1", "db-1", "p1", reservation.Reserved, 10*time.Minute, now.Add(-time.Hour), now.Add(5*time.Minute)),
		rec("10.0.0.4", "web", "identity:cache", "cache-x1", "px", reservation.Reserved, time.Hour, now.Add(-time.Hour), now.Add(30*time.Minute)),
		held,
		rec("10.0.0.6", "db", "plain", "plain", "pp", reservation.Allocated, 0, now, time.Time{}),
		rec("10.0.0.7", "db", "gone", "gone", "pg", reservation.Reserved, time.Minute, now.Add(-time.Hour), now.Add(-time.Second)),
		rec("10.0.0.8", "db", "far", "far", "pf", reservation.Reserved, time.Hour, now.Add(-time.Hour), now.Add(time.Hour)),
		{Network: "cbr0", Record: &reservation.Record{IP: netip.MustParseAddr("10.0.0.9"), State: reservation.Cooling, ExpiresAt: now.Add(time.Minute)}},
	}
	holds := func(e reservation.Entry) bool { return e.IP.String() != "10.0.0.8" }
	got, dropped := Desired("node1", entries, now, holds)
	want := []string{
		"db/db-0 pod db-0 p0 since 2026-12-07T11:59:00Z until - held false [10.0.0.2 fd00::2]",
		"db/db-1 pod db-1 p1 since 2026-12-07T11:00:00Z until 2026-12-07T12:05:00Z held false [10.0.0.3]",
		"db/db-5 pod db-5 p5 since 2026-12-07T11:00:00Z until - held true [10.0.0.5]",
		"web/identity:cache pod cache-x1 px since 2026-12-07T11:00:00Z until 2026-12-07T12:30:00Z held false [10.0.0.4]",
	}
	if dropped != 0 || len(got) != len(want) {
		t.Fatalf("Desired: %d entries (%d dropped), want %d:\n%v", len(got), dropped, len(want), got)
	}
	for i, e := range got {
		if s := describe(e); s != want[i] {
			t.Errorf("entry %d: %s\nwant      %s", i, s, want[i])
		}
	}
}

func describe(e placementv1.Entry) string {
	until := "-"
	if e.Until != nil {
		until = e.Until.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%s/%s pod %s %s since %s until %s held %v %v", e.Namespace, e.Identity, e.Pod, e.PodUID,
		e.Since.UTC().Format(time.RFC3339), until, e.Held, e.Addresses)
}

// A node holding more identities than a record takes keeps its running
// pods' entries and its latest reservations, and says how many it left out.
func TestDesiredFits(t *testing.T) {
	var entries []reservation.Entry
	n := placementv1.MaxEntries + 10
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		state, exp := reservation.Reserved, now.Add(time.Hour)
		if i%100 == 0 {
			state, exp = reservation.Allocated, time.Time{}
		}
		entries = append(entries, rec(ip, "db", fmt.Sprintf("p-%d", i), fmt.Sprintf("p-%d", i), "u", state, time.Hour, now.Add(time.Duration(i)*time.Second), exp))
	}
	got, dropped := Desired("node1", entries, now, nil)
	if len(got) != placementv1.MaxEntries || dropped != 10 {
		t.Fatalf("%d entries, %d dropped; want %d and 10", len(got), dropped, placementv1.MaxEntries)
	}
	kept := map[string]bool{}
	for _, e := range got {
		kept[e.Identity] = true
	}
	for i := range n {
		name := fmt.Sprintf("p-%d", i)
		switch {
		case i%100 == 0 && !kept[name]:
			t.Errorf("running pod %s left out", name)
		case i%100 != 0 && i < 11 && kept[name]:
			t.Errorf("one of the oldest reservations, %s, kept over a later one", name)
		}
	}
}
