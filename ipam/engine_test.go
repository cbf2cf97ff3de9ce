package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/fake"
)

// world is an engine on an in-memory store with a clock, a boot ID and a set
// of dead network namespaces the test controls.
type world struct {
	t     *testing.T
	store *fake.Store
	eng   *Engine
	now   time.Time
	dead  map[string]bool
	conf  *Config
}

func newWorld(t *testing.T, ipamJSON string) *world {
	t.Helper()
	conf, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":`+ipamJSON+`}`), "")
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	w := &world{t: t, store: fake.New(), now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), dead: map[string]bool{}, conf: conf}
	conf.HostLocalDataDir = "" // tests that import set it themselves
	w.eng = NewEngine(conf, Env{})
	// The allocation rules are tested with host-local's reuse (none);
	// TestReuseDelay* set ReuseDelay themselves.
	w.eng.reuseDelay = 0
	w.eng.env = Env{
		Now:         func() time.Time { return w.now },
		BootID:      "boot-1",
		BootTime:    func() time.Time { return time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC) },
		SandboxGone: func(ns string) bool { return w.dead[ns] },
	}
	return w
}

const v4Small = `{"type":"stickyip","subnet":"10.1.0.0/29"}` // usable .2-.6 (.1 is the gateway)

type pod struct {
	ns, name, uid string
	keep          time.Duration
}

func (w *world) add(cid string, p pod, requested ...string) ([]string, error) {
	w.t.Helper()
	req := AddRequest{ContainerID: cid, IfName: "eth0", Netns: "/run/netns/" + cid, UID: p.uid, Duration: p.keep, RequestedDuration: p.keep}
	if p.name != "" {
		req.Identity = reservation.Identity{Namespace: p.ns, Name: p.name, IfName: "eth0"}
	}
	for _, r := range requested {
		req.Requested = append(req.Requested, netip.MustParseAddr(r))
	}
	var recs []*reservation.Record
	err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		recs, err = w.eng.Add(tx, req)
		return err
	})
	var ips []string
	for _, r := range recs {
		ips = append(ips, r.IP.String())
	}
	return ips, err
}

func (w *world) mustAdd(cid string, p pod, requested ...string) []string {
	w.t.Helper()
	ips, err := w.add(cid, p, requested...)
	if err != nil {
		w.t.Fatalf("ADD %s: %v", cid, err)
	}
	return ips
}

func (w *world) del(cid string) {
	w.t.Helper()
	if err := w.store.Update("net1", func(tx reservation.Txn) error { return w.eng.Del(tx, cid, "eth0") }); err != nil {
		w.t.Fatalf("DEL %s: %v", cid, err)
	}
}

func (w *world) records() []reservation.Record {
	var out []reservation.Record
	_ = w.store.View("net1", func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error { out = append(out, *r); return nil })
	})
	return out
}

func (w *world) stateOf(ip string) reservation.State {
	for _, r := range w.records() {
		if r.IP.String() == ip {
			return r.State
		}
	}
	return ""
}

var (
	web = pod{ns: "default", name: "web", uid: "uid-web-1", keep: 10 * time.Minute}
	db  = pod{ns: "default", name: "db", uid: "uid-db-1"}
)

func anon(i int) pod {
	return pod{ns: "default", name: fmt.Sprintf("p%d", i), uid: fmt.Sprintf("u%d", i)}
}

func TestAllocationOrderRoundRobinSkipsGateway(t *testing.T) {
	w := newWorld(t, v4Small)
	got := []string{w.mustAdd("c1", anon(1))[0], w.mustAdd("c2", anon(2))[0]}
	w.del("c1")
	got = append(got, w.mustAdd("c3", anon(3))[0])
	want := []string{"10.1.0.2", "10.1.0.3", "10.1.0.4"} // .1 is the gateway; .2 not reused at once (host-local's round robin)
	if !slices.Equal(got, want) {
		t.Fatalf("allocation order = %v, want %v", got, want)
	}
}

func TestExhaustionThenFreedAddressIsReused(t *testing.T) {
	w := newWorld(t, v4Small)
	for i := range 5 {
		w.mustAdd(fmt.Sprintf("c%d", i), anon(i))
	}
	_, err := w.add("c9", anon(9))
	if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "10.1.0.1-10.1.0.6") {
		t.Fatalf("6th ADD in a /29: err = %v, want ErrPoolExhausted naming the range", err)
	}
	w.del("c2")
	if ips := w.mustAdd("c9", anon(9)); ips[0] != "10.1.0.4" {
		t.Fatalf("after freeing .4 got %v", ips)
	}
}

func TestRetriedAddReturnsSameAddress(t *testing.T) {
	w := newWorld(t, v4Small)
	a := w.mustAdd("c1", web)
	b := w.mustAdd("c1", web)
	if !slices.Equal(a, b) || len(w.records()) != 1 {
		t.Fatalf("retried ADD: %v then %v, %d records", a, b, len(w.records()))
	}
}

// A retried ADD of a dual-stack sandbox returns its addresses in the order
// of the range sets, as the first ADD did: the runtime takes the first as
// the pod's primary IP.
func TestRetriedDualStackAddKeepsRangeSetOrder(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","ranges":[[{"subnet":"fd00:1::/64"}],[{"subnet":"10.1.0.0/24"}]]}`)
	first := w.mustAdd("c1", web)
	if len(first) != 2 || !strings.Contains(first[0], ":") {
		t.Fatalf("dual-stack ADD got %v, want the IPv6 range set's address first", first)
	}
	if again := w.mustAdd("c1", web); !slices.Equal(again, first) {
		t.Fatalf("retried ADD got %v, want %v", again, first)
	}
}

func TestRequestedIPs(t *testing.T) {
	w := newWorld(t, v4Small)
	if ips := w.mustAdd("c1", anon(1), "10.1.0.5"); ips[0] != "10.1.0.5" {
		t.Fatalf("requested .5, got %v", ips)
	}
	for _, tc := range []struct {
		name string
		ips  []string
		want error
		msg  string
	}{
		// 101 is "held or reserved by someone else"; a request no one could
		// be granted is invalid (7).
		{"held by another container", []string{"10.1.0.5"}, ErrIPUnavailable, "in use by container c1"},
		{"outside every range", []string{"10.9.0.5"}, ErrInvalidRequest, "not in any configured range (10.1.0.1-10.1.0.6)"},
		{"two in one range set", []string{"10.1.0.3", "10.1.0.4"}, ErrInvalidRequest, "same range set"},
		{"the gateway", []string{"10.1.0.1"}, ErrInvalidRequest, "10.1.0.1 is the gateway of subnet 10.1.0.0/29"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.add("c2", anon(2), tc.ips...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	// The same address from two sources (the annotation and IP=) is one request.
	if ips := w.mustAdd("c2", anon(2), "10.1.0.6", "10.1.0.6"); len(ips) != 1 || ips[0] != "10.1.0.6" {
		t.Fatalf("10.1.0.6 asked twice: got %v", ips)
	}
	// A reserved address is not handed to another pod even when asked for.
	w.mustAdd("cw", web, "10.1.0.3")
	w.del("cw")
	if _, err := w.add("c3", anon(3), "10.1.0.3"); !errors.Is(err, ErrIPUnavailable) || !strings.Contains(err.Error(), "reserved for default/web") {
		t.Fatalf("requesting web's reserved IP: %v", err)
	}
	// ...but the pod it is reserved for may ask for it.
	if ips := w.mustAdd("cw2", web, "10.1.0.3"); ips[0] != "10.1.0.3" {
		t.Fatalf("web asking for its own reserved IP got %v", ips)
	}
}

func TestReservationLifecycle(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.1.0.0/30"}`) // only .2 is usable
	w.eng.policy = PoolFullFail                                    // eviction is tested on its own
	ip := w.mustAdd("c1", web)[0]
	w.del("c1")
	if w.stateOf(ip) != reservation.Reserved {
		t.Fatalf("after DEL %s is %q, want reserved", ip, w.stateOf(ip))
	}
	if _, err := w.add("c3", db); !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "1 addresses are reserved") {
		t.Fatalf("another pod took the reserved IP: %v", err)
	}
	w.now = w.now.Add(9 * time.Minute)
	if got := w.mustAdd("c4", web); got[0] != ip {
		t.Fatalf("re-created web got %v, want %s", got, ip)
	}
	w.del("c4")
	w.now = w.now.Add(10*time.Minute + time.Second)
	if got := w.mustAdd("c5", db); got[0] != ip {
		t.Fatalf("after expiry db got %v, want the expired %s", got, ip)
	}
}

func TestNoReservationWithoutAnnotation(t *testing.T) {
	w := newWorld(t, v4Small)
	w.mustAdd("c1", db)
	w.del("c1")
	if n := len(w.records()); n != 0 {
		t.Fatalf("pod without reservation left %d records after DEL", n)
	}
}

func TestDualStackReservationKeepsBothFamilies(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"fd00:1::/64"}]]}`)
	w.mustAdd("x", anon(1))
	first := w.mustAdd("c1", web)
	if len(first) != 2 || !strings.Contains(first[1], ":") {
		t.Fatalf("dual-stack ADD got %v", first)
	}
	w.del("c1")
	w.mustAdd("y", anon(2))
	if again := w.mustAdd("c2", web); !slices.Equal(again, first) {
		t.Fatalf("re-created web got %v, want %v", again, first)
	}
}

func TestFailedAddChangesNothing(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"fd00:1::/126"}]]}`)
	w.mustAdd("c1", anon(1)) // takes fd00:1::2, the only v6 address (::1 is the gateway, ::3 the last)
	w.mustAdd("c2", anon(2))
	before := w.records()
	if _, err := w.add("c3", anon(3)); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("want exhaustion of the v6 range, got %v", err)
	}
	if after := w.records(); len(after) != len(before) {
		t.Fatalf("failed ADD left %d records, had %d", len(after), len(before))
	}
}

func TestSameUIDNewSandboxTakesOver(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("old", web)[0]
	if got := w.mustAdd("new", web); got[0] != ip {
		t.Fatalf("same pod, new sandbox got %v, want %s", got, ip)
	}
	w.del("old") // the runtime cleans up the old sandbox later: must not free the new one's IP
	if w.stateOf(ip) != reservation.Allocated {
		t.Fatalf("DEL of the replaced sandbox changed %s to %q", ip, w.stateOf(ip))
	}
}

func TestDifferentPodSameNameWhileHolderAlive(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("parent", web)[0]
	copyPod := web
	copyPod.uid = "uid-static-copy"
	_, err := w.add("copy", copyPod)
	if !errors.Is(err, ErrHolderAlive) || !strings.Contains(err.Error(), "container parent") {
		t.Fatalf("err = %v, want ErrHolderAlive naming the holder", err)
	}
	w.dead["/run/netns/parent"] = true // its sandbox vanished without a DEL
	if got := w.mustAdd("copy", copyPod); got[0] != ip {
		t.Fatalf("after the holder died the copy got %v, want %s", got, ip)
	}
}

func TestPoolFullPolicy(t *testing.T) {
	for _, policy := range []PoolFullPolicy{PoolFullEvict, PoolFullFail} {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(t, v4Small)
			w.eng.policy = policy
			for i := range 5 {
				p := anon(i)
				p.keep = time.Duration(10-i) * time.Minute // p4 expires first
				w.mustAdd(fmt.Sprintf("c%d", i), p)
			}
			for i := range 5 {
				w.del(fmt.Sprintf("c%d", i))
			}
			ips, err := w.add("new", db)
			if policy == PoolFullFail {
				if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), `5 addresses are reserved`) {
					t.Fatalf("fail policy: err = %v", err)
				}
				return
			}
			if err != nil || ips[0] != "10.1.0.6" {
				t.Fatalf("evict policy: got %v, %v; want p4's 10.1.0.6 (closest to expiry)", ips, err)
			}
			if len(w.records()) != 5 {
				t.Fatalf("eviction should replace exactly one reservation")
			}
		})
	}
}

// A node switched to stickyip's host-local import in the first call after a
// reboot: the boot sweep runs before the import, so an address that both
// stickyip (a previous boot's allocation) and host-local (a file: a pod may
// hold it) record stays held by the imported allocation, and the sweep does
// not walk the records the import has just added.
func TestImportAfterRebootKeepsHostLocalsAddress(t *testing.T) {
	w := newWorld(t, v4Small)
	old := w.mustAdd("c-old", db)[0]
	netDir := filepath.Join(t.TempDir(), "net1")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(netDir, old), []byte("hl-pod\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.eng.hostLocalDir = netDir
	w.eng.env.BootID = "boot-2"
	got := w.mustAdd("c-new", anon(1))
	if got[0] == old {
		t.Fatalf("after the reboot the new pod got %s, which host-local's file says pod hl-pod holds", old)
	}
	recs := w.records()
	i := slices.IndexFunc(recs, func(r reservation.Record) bool { return r.IP.String() == old })
	if i < 0 || recs[i].State != reservation.Allocated || recs[i].ContainerID != "hl-pod" || !recs[i].Imported {
		t.Fatalf("%s after the first call: %+v; want imported, allocated to hl-pod", old, recs)
	}
}

func TestRebootReleasesPreviousBootAllocations(t *testing.T) {
	w := newWorld(t, v4Small)
	webIP := w.mustAdd("c-web", web)[0]
	dbIP := w.mustAdd("c-db", db)[0]
	// Reboot: no DEL came. The clock of web's reservation starts at boot.
	w.now = w.now.Add(2 * time.Hour)
	w.eng.env.BootID = "boot-2"
	boot := w.now.Add(-5 * time.Minute)
	w.eng.env.BootTime = func() time.Time { return boot }
	newWeb := web
	newWeb.uid = "uid-web-2"
	if got := w.mustAdd("c-web2", newWeb); got[0] != webIP {
		t.Fatalf("after reboot web got %v, want %s", got, webIP)
	}
	if st := w.stateOf(dbIP); st != "" {
		t.Fatalf("db's pre-reboot allocation %s still %q (leaked)", dbIP, st)
	}
	// A reservation whose clock started at boot expires duration after boot.
	w.del("c-web2")
	w.mustAdd("c-x", newWeb)
	w.eng.env.BootID = "boot-3"
	boot3 := w.now
	w.eng.env.BootTime = func() time.Time { return boot3 }
	w.now = w.now.Add(11 * time.Minute)
	if _, err := w.add("c-other", anon(7)); err != nil {
		t.Fatal(err)
	}
	for _, r := range w.records() {
		if r.Identity.Name == "web" {
			t.Fatalf("web's reservation outlived boot+duration: %+v", r)
		}
	}
}

func TestGCReleasesInvalidAttachments(t *testing.T) {
	w := newWorld(t, v4Small)
	w.mustAdd("keep", anon(1))
	gone := w.mustAdd("gone", web)[0]
	w.mustAdd("gone2", db)
	var n int
	err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		n, err = w.eng.GC(tx, []types.GCAttachment{{ContainerID: "keep", IfName: "eth0"}})
		return err
	})
	if err != nil || n != 2 {
		t.Fatalf("GC released %d, err %v; want 2", n, err)
	}
	if w.stateOf(gone) != reservation.Reserved || len(w.records()) != 2 {
		t.Fatalf("after GC: %+v", w.records())
	}
}

func TestCheck(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := netip.MustParseAddr(w.mustAdd("c1", web)[0])
	check := func(cid string, prev ...netip.Addr) error {
		return w.store.View("net1", func(tx reservation.Txn) error { return w.eng.Check(tx, cid, "eth0", prev) })
	}
	if err := check("c1", ip); err != nil {
		t.Fatal(err)
	}
	if err := check("c1", netip.MustParseAddr("10.1.0.6")); !errors.Is(err, ErrNoAllocation) {
		t.Fatalf("wrong prevResult IP: %v", err)
	}
	if err := check("nope"); !errors.Is(err, ErrNoAllocation) {
		t.Fatalf("unknown container: %v", err)
	}
}

func TestHostLocalImport(t *testing.T) {
	dir := t.TempDir()
	netDir := filepath.Join(dir, "net1")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"10.1.0.2":           "running-a\r\neth0",
		"10.1.0.3":           "running-b", // pre-0.7 host-local format
		"last_reserved_ip.0": "10.1.0.3",
		"lock":               "",
	} {
		if err := os.WriteFile(filepath.Join(netDir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w := newWorld(t, v4Small)
	w.eng.hostLocalDir = netDir
	if got := w.mustAdd("c1", web); got[0] != "10.1.0.4" {
		t.Fatalf("first ADD after switching got %v; .2 and .3 belong to running host-local pods", got)
	}
	w.del("running-a")
	if w.stateOf("10.1.0.2") != "" {
		t.Fatalf("DEL of an imported container did not free its address")
	}
	// The import happens once: a file appearing later is not imported again.
	_ = os.WriteFile(filepath.Join(netDir, "10.1.0.5"), []byte("late\r\neth0"), 0o600)
	w.mustAdd("c2", anon(2))
	if w.stateOf("10.1.0.5") == reservation.Allocated && w.records()[0].ContainerID == "late" {
		t.Fatalf("imported twice")
	}
}

func TestSweepReleasesDeadSandboxes(t *testing.T) {
	w := newWorld(t, v4Small)
	ip := w.mustAdd("c1", web)[0]
	w.mustAdd("c2", db)
	w.dead["/run/netns/c1"], w.dead["/run/netns/c2"] = true, true
	var expired, n int
	if err := w.store.Update("net1", func(tx reservation.Txn) (err error) { expired, n, err = w.eng.Sweep(tx); return err }); err != nil {
		t.Fatal(err)
	}
	if n != 2 || expired != 0 || w.stateOf(ip) != reservation.Reserved || len(w.records()) != 1 {
		t.Fatalf("sweep released %d, expired %d; records %+v", n, expired, w.records())
	}
	// The reservation runs out: the next sweep says it dropped it.
	w.now = w.now.Add(web.keep + time.Second)
	if err := w.store.Update("net1", func(tx reservation.Txn) (err error) { expired, n, err = w.eng.Sweep(tx); return err }); err != nil {
		t.Fatal(err)
	}
	if n != 0 || expired != 1 || len(w.records()) != 0 {
		t.Fatalf("second sweep released %d, expired %d; records %+v", n, expired, w.records())
	}
}

// TestDelWithNothingToDoCommitsNothing: a DEL that changes nothing returns
// ErrNoChange so the store rolls back (no commit, no disk sync); one that
// has something to do (the sandbox's addresses, or housekeeping) does not.
func TestDelWithNothingToDoCommitsNothing(t *testing.T) {
	w := newWorld(t, v4Small)
	del := func(cid string) error {
		var err error
		_ = w.store.Update("net1", func(tx reservation.Txn) error { err = w.eng.Del(tx, cid, "eth0"); return err })
		return err
	}
	if err := del("unknown"); errors.Is(err, reservation.ErrNoChange) {
		t.Fatal("a fresh network needs its boot ID recorded first")
	}
	w.mustAdd("c1", web)
	if err := del("unknown"); !errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("DEL of an unknown sandbox with nothing due: %v, want ErrNoChange", err)
	}
	if err := del("c1"); err != nil {
		t.Fatalf("DEL of a holder: %v", err)
	}
	if err := del("c1"); !errors.Is(err, reservation.ErrNoChange) {
		t.Fatalf("repeated DEL: %v, want ErrNoChange", err)
	}
	w.now = w.now.Add(time.Hour)
	if err := del("unknown"); err != nil {
		t.Fatalf("DEL with an expired reservation to drop: %v, want a commit", err)
	}
	if len(w.records()) != 0 {
		t.Fatalf("expired reservation kept: %+v", w.records())
	}
}
