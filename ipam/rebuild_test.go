package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

const v4Rebuild = `{"type":"stickyip","subnet":"10.1.0.0/28"}` // usable .2-.14

// attachment is what the node's sources show of one pod's sandbox.
func attachment(cid, ns, name, uid, ip string, ann map[string]string) Attachment {
	return Attachment{ContainerID: cid, IfName: "eth0", Netns: "/run/netns/" + cid,
		Args: PodArgs{Namespace: ns, Name: name, UID: uid}, Annotations: ann,
		IPs: []netip.Addr{netip.MustParseAddr(ip)}}
}

func (w *world) rebuild(atts []Attachment, restored []Restored, wait time.Time) RebuildReport {
	w.t.Helper()
	var rep RebuildReport
	err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		rep, err = w.eng.Rebuild(tx, atts, restored, wait)
		return err
	})
	if err != nil {
		w.t.Fatalf("Rebuild: %v", err)
	}
	return rep
}

func (w *world) record(ip string) *reservation.Record {
	for _, r := range w.records() {
		if r.IP.String() == ip {
			return &r
		}
	}
	return nil
}

// The rebuilt records are what the pods' ADDs made, by the plugin's own
// rules: no new pod gets an address a sandbox holds, and a sticky pod's
// DEL leaves the reservation its annotation asked for, which its next ADD
// takes back.
func TestRebuildRecordsWhatSandboxesHold(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	sticky := map[string]string{contract.AnnotationReservedDuration: "30"}
	keyed := map[string]string{contract.AnnotationReservedDuration: "1h", contract.AnnotationIdentity: "cache"}
	rep := w.rebuild([]Attachment{
		attachment("c-db0", "apps", "db-0", "u-db0", "10.1.0.2", sticky),
		attachment("c-web", "apps", "web-x1", "u-web", "10.1.0.3", keyed),
		attachment("c-plain", "apps", "plain", "u-plain", "10.1.0.4", nil),
		{ContainerID: "c-anon", IfName: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.1.0.5")}},
	}, nil, time.Time{})
	if rep.Allocated != 4 || rep.Reserved != 0 || len(rep.Problems) != 0 {
		t.Fatalf("report %+v", rep)
	}
	db := w.record("10.1.0.2")
	if db.Identity != (reservation.Identity{Namespace: "apps", Name: "db-0", IfName: "eth0"}) || db.Duration != 30*time.Minute ||
		db.UID != "u-db0" || db.PodName != "db-0" || db.BootID != "boot-1" {
		t.Fatalf("db-0's record %+v", db)
	}
	wantKeyed, _ := (&Config{Args: PodArgs{Namespace: "apps", Name: "web-x1"}, Annotations: keyed}).Identity()
	if web := w.record("10.1.0.3"); web.Identity.Name != wantKeyed.Name || web.Identity.Name != "identity:cache" || web.PodName != "web-x1" || web.Duration != time.Hour {
		t.Fatalf("keyed pod's record %+v, want identity %q (Config.Identity's)", web, wantKeyed.Name)
	}
	for i := range 9 {
		ips := w.mustAdd("new-"+string(rune('a'+i)), pod{ns: "apps", name: "new-" + string(rune('a'+i))})
		if slices.Contains([]string{"10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.0.5"}, ips[0]) {
			t.Fatalf("a new pod got %s, which a running sandbox holds", ips[0])
		}
	}
	w.del("c-db0")
	if r := w.record("10.1.0.2"); r.State != reservation.Reserved || !r.ExpiresAt.Equal(w.now.Add(30*time.Minute)) {
		t.Fatalf("db-0 after DEL: %+v", r)
	}
	if got := w.mustAdd("c-db0-new", pod{ns: "apps", name: "db-0", uid: "u-db0-2", keep: 30 * time.Minute}); got[0] != "10.1.0.2" {
		t.Fatalf("db-0 re-created got %v, want its address back", got)
	}
}

// Sandboxes the sources show but that are gone are handled as their DEL
// would have been: an earlier boot's as of the boot, this boot's as of the
// rebuild; with a duration they leave a reservation.
func TestRebuildReleasesSandboxesThatAreGone(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	sticky := map[string]string{contract.AnnotationReservedDuration: "30"}
	boot := w.eng.env.BootTime()
	prev := attachment("c-old", "apps", "db-0", "u0", "10.1.0.2", map[string]string{contract.AnnotationReservedDuration: "90"})
	prev.Since = boot.Add(-time.Hour)
	gone := attachment("c-gone", "apps", "db-1", "u1", "10.1.0.3", sticky)
	gone.Since = boot.Add(time.Minute)
	w.dead[gone.Netns] = true
	plainGone := attachment("c-plain", "apps", "plain", "u2", "10.1.0.4", nil)
	w.dead[plainGone.Netns] = true
	live := attachment("c-live", "apps", "db-2", "u3", "10.1.0.5", sticky)
	live.Since = boot.Add(time.Minute)
	rep := w.rebuild([]Attachment{prev, gone, plainGone, live}, nil, time.Time{})
	if rep.Allocated != 1 || rep.Reserved != 2 {
		t.Fatalf("report %+v: %+v", rep, w.records())
	}
	if r := w.record("10.1.0.2"); r == nil || r.State != reservation.Reserved || !r.ExpiresAt.Equal(boot.Add(90*time.Minute)) {
		t.Fatalf("previous boot's sticky sandbox: %+v, want reserved from the boot", r)
	}
	if r := w.record("10.1.0.3"); r.State != reservation.Reserved || !r.ExpiresAt.Equal(w.now.Add(30*time.Minute)) {
		t.Fatalf("this boot's gone sticky sandbox: %+v, want reserved from now", r)
	}
	if r := w.record("10.1.0.4"); r != nil && r.State != reservation.Cooling {
		t.Fatalf("gone plain sandbox: %+v, want freed", r)
	}
	if r := w.record("10.1.0.5"); r.State != reservation.Allocated || r.BootID != "boot-1" {
		t.Fatalf("live sandbox: %+v", r)
	}
}

// An address two attachments show goes to the first (the caller puts the
// running sandbox first); what cannot be placed is reported, never guessed.
func TestRebuildReportsWhatItCannotPlace(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	two := attachment("c-two", "apps", "two", "u2", "10.1.0.6", nil)
	two.IPs = append(two.IPs, netip.MustParseAddr("10.1.0.7"))
	rep := w.rebuild([]Attachment{
		attachment("c-running", "apps", "a", "ua", "10.1.0.2", nil),
		attachment("c-stale", "apps", "b", "ub", "10.1.0.2", nil),
		attachment("c-out", "apps", "c", "uc", "192.168.9.9", nil),
		attachment("c-gw", "apps", "d", "ud", "10.1.0.1", nil),
		two,
	}, nil, time.Time{})
	if r := w.record("10.1.0.2"); r.ContainerID != "c-running" {
		t.Fatalf("10.1.0.2 went to %s, want the first attachment", r.ContainerID)
	}
	want := []string{"10.1.0.2 (container c-stale/eth0 of pod apps/b): also shown for container c-running",
		"192.168.9.9 (container c-out/eth0", "10.1.0.1 (container c-gw/eth0", "10.1.0.7 (container c-two/eth0"}
	for _, s := range want {
		if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.HasPrefix(p, s) }) {
			t.Errorf("no problem starting %q in %q", s, rep.Problems)
		}
	}
	if rep.Allocated != 2 {
		t.Fatalf("report %+v", rep)
	}
}

// A pod whose annotations the config refuses now still keeps its address,
// with its identity and duration when those can be read.
func TestRebuildKeepsAPodTheConfigNowRefuses(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.1.0.0/28","ipsAnnotation":{"namespaces":[]}}`)
	a := attachment("c-1", "apps", "db-0", "u1", "10.1.0.9",
		map[string]string{contract.AnnotationReservedDuration: "30", contract.AnnotationIPs: "10.1.0.9"})
	rep := w.rebuild([]Attachment{a}, nil, time.Time{})
	if r := w.record("10.1.0.9"); r == nil || r.Identity.Name != "db-0" || r.Duration != 30*time.Minute {
		t.Fatalf("record %+v", r)
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "would be refused now") {
		t.Fatalf("problems %q", rep.Problems)
	}
}

func TestRebuildRestoresReservations(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	id := func(name string) reservation.Identity {
		return reservation.Identity{Namespace: "apps", Name: name, IfName: "eth0"}
	}
	ips := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, x := range s {
			out = append(out, netip.MustParseAddr(x))
		}
		return out
	}
	until := w.now.Add(time.Hour)
	rep := w.rebuild([]Attachment{attachment("c-run", "apps", "run", "u", "10.1.0.2", map[string]string{contract.AnnotationReservedDuration: "30"})},
		[]Restored{
			{Identity: id("gone"), PodName: "gone", IPs: ips("10.1.0.3"), Until: until, From: "index"},
			{Identity: id("other"), IPs: ips("10.1.0.2"), Until: until, From: "index"},
			{Identity: id("run"), IPs: ips("10.1.0.4"), Until: until, From: "checkpoint"},
			{Identity: id("over"), IPs: ips("10.1.0.5"), Until: w.now.Add(-time.Second), From: "index"},
		}, time.Time{})
	if r := w.record("10.1.0.3"); r.State != reservation.Reserved || r.Identity != id("gone") || !r.ExpiresAt.Equal(until) {
		t.Fatalf("restored reservation %+v", r)
	}
	if r := w.record("10.1.0.2"); r.ContainerID != "c-run" {
		t.Fatalf("a restored reservation took a running sandbox's address: %+v", r)
	}
	for _, ip := range []string{"10.1.0.4", "10.1.0.5"} {
		if r := w.record(ip); r != nil {
			t.Fatalf("%s: %+v, want nothing (the pod holds another address; an expired reservation)", ip, r)
		}
	}
	if len(rep.Problems) != 2 || rep.Reserved != 1 {
		t.Fatalf("report %+v", rep)
	}
	// Two sources of one reservation: the earlier end wins.
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		_, err := w.eng.RestoreReservations(tx, []Restored{{Identity: id("gone"), IPs: ips("10.1.0.3"), Until: w.now.Add(time.Minute)}})
		return err
	})
	if err != nil || !w.record("10.1.0.3").ExpiresAt.Equal(w.now.Add(time.Minute)) {
		t.Fatalf("%v: %+v", err, w.record("10.1.0.3"))
	}
	if got := w.mustAdd("c-gone-2", pod{ns: "apps", name: "gone", uid: "new"}); got[0] != "10.1.0.3" {
		t.Fatalf("the deleted pod re-created got %v, want its restored reservation", got)
	}
}

// While a rebuilt network waits for the index's reservations, no address a
// pod does not hold already is handed out; the pods that hold one get it.
func TestRebuildWaitsForTheIndex(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	wait := w.now.Add(time.Hour)
	w.rebuild([]Attachment{attachment("c-db0", "apps", "db-0", "u-db0", "10.1.0.2", map[string]string{contract.AnnotationReservedDuration: "30"})}, nil, wait)
	if _, err := w.add("c-new", pod{ns: "apps", name: "new"}); !errors.Is(err, ErrRebuildWait) {
		t.Fatalf("new pod while waiting: %v, want ErrRebuildWait", err)
	}
	if _, err := w.add("c-req", pod{ns: "apps", name: "req"}, "10.1.0.9"); !errors.Is(err, ErrRebuildWait) {
		t.Fatalf("requested address while waiting: %v, want ErrRebuildWait", err)
	}
	if got := w.mustAdd("c-db0-2", pod{ns: "apps", name: "db-0", uid: "u-db0"}); got[0] != "10.1.0.2" {
		t.Fatalf("db-0's new sandbox got %v", got)
	}
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		_, err := w.eng.RestoreReservations(tx, []Restored{{Identity: reservation.Identity{Namespace: "apps", Name: "gone", IfName: "eth0"},
			IPs: []netip.Addr{netip.MustParseAddr("10.1.0.3")}, Until: w.now.Add(time.Hour), From: "index"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		got := w.mustAdd("c-after-"+string(rune('a'+i)), pod{ns: "apps", name: "after-" + string(rune('a'+i))})
		if got[0] == "10.1.0.3" || got[0] == "10.1.0.2" {
			t.Fatalf("a new pod got %s, reserved or held", got[0])
		}
	}
	// Without the index the wait ends on its own.
	w2 := newWorld(t, v4Rebuild)
	w2.rebuild(nil, nil, w2.now.Add(time.Minute))
	w2.now = w2.now.Add(time.Minute)
	w2.mustAdd("c-late", pod{ns: "apps", name: "late"})
}

func TestRebuildOnlyIntoAnEmptyNetwork(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	w.mustAdd("c-1", pod{ns: "apps", name: "a"})
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		_, err := w.eng.Rebuild(tx, nil, nil, time.Time{})
		return err
	})
	if err == nil {
		t.Fatal("Rebuild into a network with records succeeded")
	}
}

// An index entry its StatefulSet kept, restored onto the reservation a
// checkpoint already gave back, makes that reservation follow the
// StatefulSet (held); an allocation of the same pod stays as it is.
func TestRestoreKeptByStatefulSet(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	web0 := reservation.Identity{Namespace: "apps", Name: "web-0", IfName: "eth0"}
	web1 := reservation.Identity{Namespace: "apps", Name: "web-1", IfName: "eth0"}
	w.putRecord(&reservation.Record{IP: netip.MustParseAddr("10.1.0.3"), State: reservation.Reserved, Identity: web0, Duration: time.Hour,
		ReleasedAt: w.now, ExpiresAt: w.now.Add(time.Hour)})
	w.putRecord(&reservation.Record{IP: netip.MustParseAddr("10.1.0.4"), State: reservation.Allocated, Identity: web1, ContainerID: "c-web-1",
		IfName: "eth0", Duration: time.Hour, BootID: "boot-1"})
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		_, err := w.eng.RestoreReservations(tx, []Restored{
			{Identity: web0, IPs: []netip.Addr{netip.MustParseAddr("10.1.0.3")}, Retained: true, Duration: time.Hour, From: "index"},
			{Identity: web1, IPs: []netip.Addr{netip.MustParseAddr("10.1.0.4")}, Retained: true, Duration: time.Hour, From: "index"},
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := w.record("10.1.0.3"); r.State != reservation.Reserved || r.StatefulSet == nil || r.StatefulSet.Name != "web" {
		t.Fatalf("apps/web-0's reservation %+v, want it following StatefulSet web", r)
	}
	if r := w.record("10.1.0.4"); r.State != reservation.Allocated || r.StatefulSet != nil || r.ContainerID != "c-web-1" {
		t.Fatalf("apps/web-1's allocation %+v, want it unchanged", r)
	}
}

// A rebuild with a reuse delay leaves the address of a plain sandbox that
// is gone cooling, and its report counts it.
func TestRebuildCountsCooling(t *testing.T) {
	w := newWorld(t, v4Rebuild)
	w.eng.reuseDelay = time.Minute
	gone := attachment("c-gone", "apps", "plain", "u2", "10.1.0.4", nil)
	w.dead[gone.Netns] = true
	rep := w.rebuild([]Attachment{gone, attachment("c-live", "apps", "live", "u3", "10.1.0.5", nil)}, nil, time.Time{})
	if rep.Cooling != 1 || rep.Allocated != 1 || w.stateOf("10.1.0.4") != reservation.Cooling {
		t.Fatalf("report %+v, records %+v; want the gone sandbox's address cooling and counted", rep, w.records())
	}
}
