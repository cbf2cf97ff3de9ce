package ipam

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// TestReuseDelayHoldsFreedAddressesBack: host-local's round robin hands an
// address out again as soon as it wraps round to it, even one freed a
// second ago (DNS records and conntrack entries may still point at it).
// With a delay that address is skipped while another is free.
func TestReuseDelayHoldsFreedAddressesBack(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		want  []string
	}{
		{0, []string{"10.1.0.2", "10.1.0.3"}},
		{30 * time.Second, []string{"10.1.0.2", "10.1.0.4"}},
	} {
		t.Run(fmt.Sprint(tc.delay), func(t *testing.T) {
			w := newWorld(t, v4Small)
			w.eng.reuseDelay = tc.delay
			for i, cid := range []string{"a", "b", "c", "d", "e"} {
				w.mustAdd(cid, anon(i)) // .2 .. .6; the round robin is at .6
			}
			w.del("a")
			w.del("c")
			w.now = w.now.Add(time.Minute) // .2 and .4 long free
			w.del("b")                     // .3 freed just now
			var got []string
			for i, cid := range []string{"x", "y"} {
				got = append(got, w.mustAdd(cid, anon(10+i))[0])
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("after the wrap the ADDs got %v, want %v", got, tc.want)
			}
		})
	}
}

// When nothing else is free, the address freed longest ago goes first, and
// a cooling address runs out of its delay like a reservation.
func TestReuseDelayFullPool(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	for i := 1; i <= 5; i++ {
		w.mustAdd(fmt.Sprintf("c%d", i), anon(i)) // .2 .. .6
	}
	w.del("c4") // .5 freed first
	w.now = w.now.Add(time.Second)
	w.del("c2") // .3 freed later
	if got := w.mustAdd("n1", anon(10)); got[0] != "10.1.0.5" {
		t.Fatalf("full pool: got %s, want 10.1.0.5, the address freed longest ago", got[0])
	}
	if w.stateOf("10.1.0.3") != reservation.Cooling {
		t.Fatalf("10.1.0.3: %s, want cooling", w.stateOf("10.1.0.3"))
	}
	w.now = w.now.Add(time.Minute)
	w.del("unknown") // housekeeping runs on any call
	if st := w.stateOf("10.1.0.3"); st != "" {
		t.Fatalf("10.1.0.3 after its delay: %s, want free", st)
	}
}

// A cooling address goes only to the identity that last held it until its
// delay has passed: stale DNS records and conntrack entries for that pod
// must not reach a stranger who names the address.
func TestRequestedCoolingAddress(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	p1 := anon(1)
	ip := w.mustAdd("c1", p1)[0]
	w.del("c1")
	for _, tc := range []struct {
		name string
		who  pod
	}{
		{"another pod of the namespace", anon(2)},
		{"a pod of another namespace", pod{ns: "tenant", name: "p1", uid: "t1"}},
		{"a call without pod arguments", pod{}},
	} {
		_, err := w.add("x-"+tc.who.uid, tc.who, ip)
		if !errors.Is(err, ErrIPUnavailable) || !strings.Contains(err.Error(), "cooling down until 2026-01-01T12:01:00Z") ||
			!strings.Contains(err.Error(), "only default/p1") {
			t.Errorf("%s asking for %s, cooling for default/p1: %v; want ErrIPUnavailable naming the end of the delay and default/p1", tc.name, ip, err)
		}
	}
	if st := w.stateOf(ip); st != reservation.Cooling {
		t.Fatalf("%s after the refusals: %s, want still cooling", ip, st)
	}
	// Its last holder may have it back during the delay (same identity, new pod UID).
	again := p1
	again.uid = "u1-again"
	if got := w.mustAdd("c1-again", again, ip); got[0] != ip {
		t.Fatalf("default/p1 asking for its own cooling %s got %v", ip, got)
	}
	w.del("c1-again")
	// Once the delay has passed, anyone may ask for it.
	w.now = w.now.Add(time.Minute)
	if got := w.mustAdd("c2", anon(2), ip); got[0] != ip {
		t.Fatalf("after the delay default/p2 asking for %s got %v", ip, got)
	}
}

// A cooling record written before records kept their last identity belongs
// to nobody known: nobody may ask for it until its delay has passed.
func TestRequestedCoolingAddressOfAnEarlierVersion(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	ip := netip.MustParseAddr("10.1.0.4")
	if err := w.store.Update("net1", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: ip, State: reservation.Cooling, AllocatedAt: w.now.Add(-time.Hour),
			ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Minute), LastContainerID: "old"})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.add("c1", anon(1), ip.String()); !errors.Is(err, ErrIPUnavailable) {
		t.Fatalf("asking for an old cooling record's %s: %v, want ErrIPUnavailable", ip, err)
	}
	w.now = w.now.Add(time.Minute)
	if got := w.mustAdd("c1", anon(1), ip.String()); got[0] != ip.String() {
		t.Fatalf("after its delay got %v", got)
	}
}

// The pool-full fallback hands out the address cooled longest whoever last
// held it: the pod did not choose it (documented: the delay is a
// preference when nothing else is free).
func TestReuseDelayFullPoolRemembersLastHolder(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	for i := 1; i <= 5; i++ {
		w.mustAdd(fmt.Sprintf("c%d", i), anon(i))
	}
	w.del("c3")
	var rec reservation.Record
	for _, r := range w.records() {
		if r.IP.String() == "10.1.0.4" {
			rec = r
		}
	}
	if rec.State != reservation.Cooling || rec.LastIdentity != (reservation.Identity{Namespace: "default", Name: "p3", IfName: "eth0"}) || !rec.Identity.IsZero() {
		t.Fatalf("10.1.0.4 after its DEL: %+v; want cooling, last held by default/p3, held by nobody", rec)
	}
	if got := w.mustAdd("n1", pod{ns: "tenant", name: "x", uid: "x"}); got[0] != "10.1.0.4" {
		t.Fatalf("full pool: got %v, want the cooling 10.1.0.4", got)
	}
}

func TestReleasePod(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","ranges":[[{"subnet":"10.1.0.0/29"}],[{"subnet":"fd00::/125"}]]}`)
	ips := w.mustAdd("c1", web) // dual-stack: two addresses
	w.del("c1")
	other := w.mustAdd("c2", pod{ns: "default", name: "other", uid: "o", keep: time.Hour})
	var done []PodRelease
	if err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		done, err = ReleasePod(tx, "default", "web", "", slog.New(slog.DiscardHandler))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 || !done[0].Dropped || !done[1].Dropped {
		t.Fatalf("ReleasePod(web) = %+v, want both reservations dropped", done)
	}
	for _, ip := range ips {
		if st := w.stateOf(ip); st != "" {
			t.Errorf("%s: %s after release, want free", ip, st)
		}
	}
	// A live holder keeps its address but loses its duration: its DEL frees it.
	if err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		done, err = ReleasePod(tx, "default", "other", "eth0", slog.New(slog.DiscardHandler))
		return err
	}); err != nil || len(done) != 2 || done[0].Dropped {
		t.Fatalf("ReleasePod(other) = %+v, %v", done, err)
	}
	w.del("c2")
	for _, ip := range other {
		if st := w.stateOf(ip); st != "" {
			t.Errorf("%s: %s after the DEL of a released pod, want free", ip, st)
		}
	}
}

func TestSummary(t *testing.T) {
	w := newWorld(t, v4Small)
	w.eng.reuseDelay = time.Minute
	w.mustAdd("a", anon(1))
	w.mustAdd("b", web)
	w.mustAdd("c", anon(3))
	w.del("b") // reserved
	w.del("c") // cooling
	summary := func() SetSummary {
		var sets []SetSummary
		var outside int
		if err := w.store.View("net1", func(tx reservation.Txn) (err error) {
			sets, outside, err = w.eng.Summary(tx, w.now)
			return err
		}); err != nil || len(sets) != 1 || outside != 0 {
			t.Fatalf("Summary: %v %v %d", sets, err, outside)
		}
		return sets[0]
	}
	want := SetSummary{RangeSet: 0, Ranges: "10.1.0.1-10.1.0.6", Size: 5, Allocated: 1, Reserved: 1, Cooling: 1, Free: 2}
	if got := summary(); got != want {
		t.Fatalf("Summary = %+v, want %+v", got, want)
	}
	w.now = w.now.Add(2 * time.Minute) // cooling over, not yet purged: counts as free
	want.Cooling, want.Free = 0, 3
	if got := summary(); got != want {
		t.Fatalf("after the delay: %+v, want %+v", got, want)
	}
	// A record in no range set (the range changed) counts as outside.
	w.putRecord(&reservation.Record{IP: netip.MustParseAddr("10.2.0.9"), State: reservation.Allocated, ContainerID: "old", IfName: "eth0", BootID: "boot-1"})
	var outside int
	if err := w.store.View("net1", func(tx reservation.Txn) (err error) { _, outside, err = w.eng.Summary(tx, w.now); return err }); err != nil || outside != 1 {
		t.Fatalf("a record outside the ranges: outside %d (%v), want 1", outside, err)
	}
}
