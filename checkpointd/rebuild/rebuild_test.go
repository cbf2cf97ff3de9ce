package rebuild

import (
	"bytes"
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// scenario is the node of the issue: a StatefulSet pod db-0 (sticky), a
// deleted sticky pod whose reservation the index holds (gone), three plain
// pods; then the store's first 32 KiB are overwritten.
type scenario struct {
	*node
	ips     map[string]string
	cid     map[string]string // each running pod's sandbox
	damaged []byte
}

func newScenario(t *testing.T) *scenario {
	n := newNode(t, true)
	s := &scenario{node: n, ips: map[string]string{}, cid: map[string]string{}}
	for _, p := range []struct {
		name string
		keep time.Duration
	}{{"db-0", 30 * time.Minute}, {"gone", 30 * time.Minute}, {"plain-1", 0}, {"plain-2", 0}, {"plain-3", 0}} {
		ip, err := n.add("c-"+p.name, "apps", p.name, p.keep)
		must(t, err)
		s.ips[p.name] = ip
	}
	n.del("c-gone")
	n.running("c-db-0", "apps", "db-0", s.ips["db-0"], sticky30, true)
	n.running("c-plain-1", "apps", "plain-1", s.ips["plain-1"], nil, true)
	n.running("c-plain-2", "apps", "plain-2", s.ips["plain-2"], nil, false) // no CNI result: the namespace shows it
	n.running("c-plain-3", "apps", "plain-3", s.ips["plain-3"], nil, true)
	n.netns["/run/netns/c-plain-3"] = nil // namespace unreadable: the CNI result shows it
	delete(n.netns, "/run/netns/c-plain-3")
	for _, name := range []string{"db-0", "plain-1", "plain-2", "plain-3"} {
		s.cid[name] = "c-" + name
	}
	n.index.entries = []IndexEntry{
		{Namespace: "apps", Identity: "db-0", Pod: "db-0", IPs: []netip.Addr{netip.MustParseAddr(s.ips["db-0"])}},
		{Namespace: "apps", Identity: "gone", Pod: "gone", IPs: []netip.Addr{netip.MustParseAddr(s.ips["gone"])}, Until: n.now.Add(25 * time.Minute)},
	}
	return s
}

// start runs pod name's new sandbox cid: its ADD, then the runtime runs it
// with the address the ADD gave.
func (s *scenario) start(cid, name string, keep time.Duration) (string, error) {
	s.t.Helper()
	ip, err := s.add(cid, "apps", name, keep)
	if err != nil {
		return "", err
	}
	var ann map[string]string
	if keep > 0 {
		ann = sticky30
	}
	s.running(cid, "apps", name, ip, ann, true)
	s.cid[name] = cid
	return ip, nil
}

// end stops pod name's sandbox and runs its DEL, as the kubelet does.
func (s *scenario) end(name string) {
	s.t.Helper()
	s.stop(s.cid[name])
	s.del(s.cid[name])
	delete(s.cid, name)
}

// afterRebuild checks what the users of the node must see: the running
// pods' addresses allocated to their sandboxes; then 8 new pods, gone
// re-created and db-0 deleted and re-created, each sandbox running once
// its ADD returns — after each, every address a ready sandbox holds is
// held by it alone and allocated to it in the store (requireDistinct), and
// no new pod gets gone's reserved address.
func (s *scenario) afterRebuild(t *testing.T) {
	t.Helper()
	got := s.entries()
	for _, name := range []string{"db-0", "plain-1", "plain-2", "plain-3"} {
		cid, ok := s.cid[name]
		if !ok {
			continue // deleted meanwhile
		}
		if e := got[s.ips[name]]; e.State != reservation.Allocated || e.ContainerID != cid {
			t.Fatalf("%s's address %s after the rebuild: %+v, want allocated to its sandbox %s", name, s.ips[name], e, cid)
		}
	}
	if e := got[s.ips["db-0"]]; e.Identity.Name != "db-0" || e.Duration != 30*time.Minute {
		t.Fatalf("db-0 lost its identity or duration: %+v", e)
	}
	s.check()
	s.requireDistinct()
	for i := range 8 {
		name := "new-" + string(rune('a'+i))
		ip, err := s.start("c-"+name, name, 0)
		must(t, err)
		if ip == s.ips["gone"] {
			t.Fatalf("%s got %s, which gone's reservation holds", name, ip)
		}
		s.requireDistinct()
	}
	// The deleted pod re-created gets its address; db-0 deleted comes back with its own.
	if ip, err := s.start("c-gone-2", "gone", 30*time.Minute); err != nil || ip != s.ips["gone"] {
		t.Fatalf("gone re-created got %s (%v), want %s", ip, err, s.ips["gone"])
	}
	s.end("db-0")
	if ip, err := s.start("c-db-0-2", "db-0", 30*time.Minute); err != nil || ip != s.ips["db-0"] {
		t.Fatalf("db-0 re-created got %s (%v), want %s", ip, err, s.ips["db-0"])
	}
	s.requireDistinct()
	s.check()
}

func (s *scenario) keptDamage(t *testing.T) {
	t.Helper()
	kept, _ := filepath.Glob(filepath.Join(s.dir, boltstore.AsidePrefix+"*"))
	if len(kept) != 1 {
		t.Fatalf("damaged files kept: %v", kept)
	}
	b, err := os.ReadFile(kept[0])
	if err != nil || !bytes.Equal(b, s.damaged) {
		t.Fatalf("the damaged bytes are not on disk as they were (%v)", err)
	}
}

func TestRebuildOfADamagedStore(t *testing.T) {
	s := newScenario(t)
	s.damaged = s.damage()
	if !s.b.Pass(context.Background()) {
		t.Fatal("not rebuilt")
	}
	s.keptDamage(t)
	if got := s.entries()[s.ips["gone"]]; got.State != reservation.Reserved || !got.ExpiresAt.Equal(s.now.Add(25*time.Minute)) {
		t.Fatalf("gone's reservation: %+v, want it until the index's end", got)
	}
	if testutil.ToFloat64(s.m.StoreRebuilds) != 1 || testutil.ToFloat64(s.m.StoreDamaged) != 0 || testutil.ToFloat64(s.m.StoreRebuildWaiting) != 0 {
		t.Fatal("metrics do not say it")
	}
	if len(s.events.events) != 1 || !strings.Contains(s.events.events[0], EventRebuilt) || !strings.Contains(s.events.events[0], "kept as") ||
		!strings.Contains(s.events.events[0], "4 allocated, 1 reserved") {
		t.Fatalf("Events %q", s.events.events)
	}
	s.afterRebuild(t)
	if s.b.Pass(context.Background()) {
		t.Fatal("a usable store was rebuilt again")
	}
}

func TestRebuildOfADeletedStore(t *testing.T) {
	s := newScenario(t)
	must(t, os.Remove(filepath.Join(s.dir, boltstore.DBFile)))
	if _, err := s.add("c-early", "apps", "early", 0); !errors.Is(err, reservation.ErrLost) {
		t.Fatalf("ADD on the lost store: %v, want ErrLost", err)
	}
	if !s.b.Pass(context.Background()) {
		t.Fatal("not rebuilt")
	}
	s.afterRebuild(t)
}

// With the API server away, what the node knows alone is rebuilt; no new
// address is handed out (the index's reservations are not in yet), nor is
// the index changed; once the API server answers they are restored. Calls
// keep arriving meanwhile: a new pod and gone re-created are refused (error
// 11: the kubelet retries), db-0's sandbox dies and comes back (DEL, ADD)
// with its own address.
func TestRebuildWithTheAPIServerAway(t *testing.T) {
	s := newScenario(t)
	s.damaged = s.damage()
	s.api.up = false
	s.b.Pass(context.Background())
	if s.index.reads != 0 {
		t.Fatal("the index was read while the API server was away")
	}
	if _, err := s.start("c-new", "new", 0); !errors.Is(err, ipam.ErrRebuildWait) {
		t.Fatalf("a new pod while the index is not read: %v, want ErrRebuildWait", err)
	}
	if ip, err := s.start("c-gone-w", "gone", 30*time.Minute); !errors.Is(err, ipam.ErrRebuildWait) {
		t.Fatalf("gone re-created while the index is not read: %s (%v), want ErrRebuildWait", ip, err)
	}
	s.end("db-0")
	if ip, err := s.start("c-db-0-w", "db-0", 30*time.Minute); err != nil || ip != s.ips["db-0"] {
		t.Fatalf("db-0's new sandbox while the index is not read: %s (%v), want its own %s", ip, err, s.ips["db-0"])
	}
	s.requireDistinct()
	if _, err := (Published{Store: s.store}).Entries(); err == nil {
		t.Fatal("the placement publisher reads the store while it waits for the index")
	}
	if testutil.ToFloat64(s.m.StoreRebuildWaiting) != 1 || len(s.events.events) != 0 {
		t.Fatalf("waiting %v, events %q (none until the API server answers)", testutil.ToFloat64(s.m.StoreRebuildWaiting), s.events.events)
	}
	s.api.up = true
	s.b.Pass(context.Background())
	if len(s.events.events) != 2 || !strings.Contains(s.events.events[0], EventRebuilt) || !strings.Contains(s.events.events[1], EventRestored) {
		t.Fatalf("events %q", s.events.events)
	}
	if _, err := (Published{Store: s.store}).Entries(); err != nil {
		t.Fatal(err)
	}
	s.keptDamage(t)
	s.afterRebuild(t)
}

// Calls that arrive while a rebuild reads its sources find the damaged
// store and are refused (the kubelet retries them): a new pod's ADD and
// plain-1's DEL. Retried once the store is rebuilt, the DEL frees
// plain-1's address and the ADD gets an address no ready sandbox holds.
func TestRebuildWithCallsArriving(t *testing.T) {
	for _, damage := range []string{"overwritten", "deleted"} {
		t.Run(damage, func(t *testing.T) {
			s := newScenario(t)
			if damage == "deleted" {
				must(t, os.Remove(filepath.Join(s.dir, boltstore.DBFile)))
			} else {
				s.damaged = s.damage()
			}
			var addErr, delErr error
			s.rt.listed = func() {
				s.rt.listed = nil
				_, addErr = s.start("c-during", "during", 0)
				delErr = s.delErr(s.cid["plain-1"])
			}
			if !s.b.Pass(context.Background()) {
				t.Fatal("not rebuilt")
			}
			if addErr == nil || delErr == nil {
				t.Fatalf("calls during the rebuild: ADD %v, DEL %v; want both refused", addErr, delErr)
			}
			s.requireDistinct()
			s.end("plain-1") // the DEL retried
			if e, ok := s.entries()[s.ips["plain-1"]]; ok && e.State == reservation.Allocated {
				t.Fatalf("plain-1's address after its DEL: %+v", e)
			}
			if _, err := s.start("c-during-2", "during", 0); err != nil {
				t.Fatal(err)
			}
			s.requireDistinct()
			s.afterRebuild(t)
		})
	}
}

// A running sandbox whose addresses nothing shows: no rebuild (the node
// stays NotReady) until one source does.
func TestRebuildWaitsForUnreadableSources(t *testing.T) {
	s := newScenario(t)
	s.damage()
	s.rt.sandboxes = append(s.rt.sandboxes, cri.Sandbox{ID: "c-blind", Namespace: "apps", Name: "blind", Ready: true})
	s.rt.statusErr["c-blind"] = errors.New("rpc error: deadline exceeded")
	if s.b.Pass(context.Background()) {
		t.Fatal("rebuilt without the addresses of a running sandbox")
	}
	if testutil.ToFloat64(s.m.StoreDamaged) != 1 {
		t.Fatal("the damage is not in the metric")
	}
	s.rt.listErr = errors.New("runtime down")
	if s.b.Pass(context.Background()) {
		t.Fatal("rebuilt without the runtime")
	}
	s.rt.listErr = nil
	delete(s.rt.statusErr, "c-blind")
	s.rt.status["c-blind"] = cri.Status{IPs: []netip.Addr{netip.MustParseAddr("10.9.0.77")}}
	if !s.b.Pass(context.Background()) {
		t.Fatal("not rebuilt once the sources are readable")
	}
	if e := s.entries()["10.9.0.77"]; e.ContainerID != "c-blind" || e.IfName != "eth0" {
		t.Fatalf("the runtime's address: %+v", e)
	}
}

// --rebuild-store=false: today's behaviour, said in a metric and an Event.
func TestRebuildOff(t *testing.T) {
	s := newScenario(t)
	s.node.b.cfg.Enabled = false
	damaged := s.damage()
	if s.b.Pass(context.Background()) {
		t.Fatal("rebuilt with --rebuild-store=false")
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, boltstore.DBFile)); !bytes.Equal(b, damaged) {
		t.Fatal("the damaged file was changed")
	}
	if testutil.ToFloat64(s.m.StoreDamaged) != 1 || len(s.events.events) != 1 || !strings.Contains(s.events.events[0], EventDamaged) {
		t.Fatalf("metric %v, events %q", testutil.ToFloat64(s.m.StoreDamaged), s.events.events)
	}
}

// A checkpoint keeps a saved pod's address while it does not run; the
// index, when it says the pod was deleted, ends it then.
func TestRebuildKeepsCheckpointedAddresses(t *testing.T) {
	s := newScenario(t)
	s.ckpts = append(s.ckpts, checkpointOf("apps", "gone", sticky30, s.ips["gone"]), checkpointOf("apps", "db-0", sticky30, s.ips["db-0"]))
	s.damage()
	s.api.up = false
	s.b.Pass(context.Background())
	if got := s.entries()[s.ips["gone"]]; got.State != reservation.Reserved || !got.ExpiresAt.Equal(s.now.Add(30*time.Minute)) {
		t.Fatalf("the checkpointed pod's address with the API away: %+v", got)
	}
	s.api.up = true
	s.b.Pass(context.Background())
	if got := s.entries()[s.ips["gone"]]; !got.ExpiresAt.Equal(s.now.Add(25 * time.Minute)) {
		t.Fatalf("after the index: %+v, want the index's earlier end", got)
	}
	s.afterRebuild(t)
}

// An API server that refuses the index (no placement manifests, no RBAC)
// is no reason to hold back new addresses: the rebuild says what is lost.
func TestRebuildWhenTheIndexIsRefused(t *testing.T) {
	s := newScenario(t)
	s.damage()
	s.index.err = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC"))
	s.b.Pass(context.Background())
	if _, err := s.add("c-new", "apps", "new", 0); err != nil {
		t.Fatalf("new pod after a rebuild without index: %v", err)
	}
	s.index.err = errAway
	s2 := newScenario(t)
	s2.damage()
	s2.index.err = errAway
	s2.b.Pass(context.Background())
	if _, err := s2.add("c-new", "apps", "new", 0); !errors.Is(err, ipam.ErrRebuildWait) {
		t.Fatalf("an index that could not be reached: %v, want the wait", err)
	}
}

// Sources that disagree: the running sandbox keeps the address; a stopped
// sandbox whose DEL has not succeeded keeps its own until that DEL; a
// previous boot's sticky sandbox leaves a reservation from the boot.
func TestRebuildWhenSourcesDisagree(t *testing.T) {
	n := newNode(t, true)
	_, e := n.add("c-x", "apps", "x", 0)
	must(t, e)
	must(t, os.Remove(filepath.Join(n.dir, boltstore.DBFile)))
	n.running("c-run", "apps", "run", "10.9.0.20", nil, true)
	n.cache("c-stale", "apps", "stale", "10.9.0.20", nil, "/run/netns/c-stale") // a leftover claiming it
	n.gone["/run/netns/c-stale"] = true
	// db-0 deleted while the store was damaged: its DEL keeps failing, the
	// runtime lists it stopped, its CNI result stays.
	// The bridge plugin removed its interface before the IPAM's DEL failed:
	// its namespace shows no address, its CNI result does.
	n.rt.sandboxes = append(n.rt.sandboxes, cri.Sandbox{ID: "c-db", Namespace: "apps", Name: "db-0", UID: "uid-db-0"})
	n.rt.status["c-db"] = cri.Status{IPs: []netip.Addr{netip.MustParseAddr("10.9.0.21")}, Netns: "/run/netns/c-db"}
	n.netns["/run/netns/c-db"] = map[string][]netip.Addr{"lo": nil}
	n.cache("c-db", "apps", "db-0", "10.9.0.21", sticky30, "/run/netns/c-db")
	// CRI-O after a failed DEL: the sandbox still runs, its interface and its
	// CNI result are gone, only the runtime's status shows its address.
	n.running("c-crio", "apps", "crio-0", "10.9.0.23", sticky30, false)
	n.netns["/run/netns/c-crio"] = map[string][]netip.Addr{"lo": nil}
	// A sticky pod of the previous boot: the runtime forgot it, its result stays.
	n.cache("c-old", "apps", "old", "10.9.0.22", map[string]string{"io.kubernetes.cri/reserved-ip-duration": "2h"}, "/run/netns/c-old")
	old := filepath.Join(n.cacheDir, "net1-c-old-eth0")
	must(t, os.Chtimes(old, n.now.Add(-3*time.Hour), n.now.Add(-3*time.Hour)))
	if !n.b.Pass(context.Background()) {
		t.Fatal("not rebuilt")
	}
	got := n.entries()
	if got["10.9.0.20"].ContainerID != "c-run" {
		t.Fatalf("10.9.0.20: %+v, want the running sandbox's", got["10.9.0.20"])
	}
	if got["10.9.0.21"].State != reservation.Allocated || got["10.9.0.21"].ContainerID != "c-db" {
		t.Fatalf("stopped db-0: %+v", got["10.9.0.21"])
	}
	boot := n.env.BootTime()
	if got["10.9.0.22"].State != reservation.Reserved || !got["10.9.0.22"].ExpiresAt.Equal(boot.Add(2*time.Hour)) {
		t.Fatalf("previous boot's sticky pod: %+v", got["10.9.0.22"])
	}
	if e := got["10.9.0.23"]; e.State != reservation.Allocated || e.ContainerID != "c-crio" || e.Duration != 30*time.Minute {
		t.Fatalf("the address only the runtime's status shows: %+v", e)
	}
	n.del("c-db") // its DEL retried: a reservation for db-0
	if ip, err := n.add("c-db-2", "apps", "db-0", 30*time.Minute); err != nil || ip != "10.9.0.21" {
		t.Fatalf("db-0 got %s (%v)", ip, err)
	}
	n.check()
}

// A store is never rebuilt without the config of a network that keeps its
// records there (a wrong --cni-conf-dir, a config not written yet): the
// rebuilt store would be empty, and the plugin would hand out every
// running pod's address.
func TestRebuildNeedsTheNetworksConfig(t *testing.T) {
	s := newScenario(t)
	s.damage()
	conf := filepath.Join(filepath.Dir(s.dir), "net.d", "10-net1.conflist")
	saved, err := os.ReadFile(conf)
	must(t, err)
	must(t, os.Remove(conf))
	if s.b.Pass(context.Background()) {
		t.Fatal("rebuilt without any network config")
	}
	must(t, os.WriteFile(conf, saved, 0o644))
	if !s.b.Pass(context.Background()) {
		t.Fatal("not rebuilt once the config is back")
	}
	s.afterRebuild(t)
}

// A sandbox the runtime runs is of this boot, whatever creation time it
// reports (a fake or a runtime that gives none: the Unix epoch); one whose
// namespace cannot be read and for which nothing shows an address stops
// the rebuild.
func TestRebuildOfRunningSandboxesWithoutCreationTime(t *testing.T) {
	n := newNode(t, true)
	_, e := n.add("c-x", "apps", "x", 0)
	must(t, e)
	n.damage()
	n.rt.sandboxes = append(n.rt.sandboxes, cri.Sandbox{ID: "c-epoch", Namespace: "apps", Name: "epoch", Ready: true, CreatedAt: time.Unix(0, 0)},
		cri.Sandbox{ID: "c-mute", Namespace: "apps", Name: "mute", Ready: true, CreatedAt: time.Unix(0, 0)})
	n.rt.status["c-epoch"] = cri.Status{IPs: []netip.Addr{netip.MustParseAddr("10.9.0.30")}}
	if n.b.Pass(context.Background()) {
		t.Fatal("rebuilt while nothing shows the addresses of a running sandbox (c-mute)")
	}
	n.rt.status["c-mute"] = cri.Status{IPs: []netip.Addr{netip.MustParseAddr("10.9.0.31")}}
	if !n.b.Pass(context.Background()) {
		t.Fatal("not rebuilt")
	}
	for ip, cid := range map[string]string{"10.9.0.30": "c-epoch", "10.9.0.31": "c-mute"} {
		if e := n.entries()[ip]; e.State != reservation.Allocated || e.ContainerID != cid || e.BootID != "boot-2" {
			t.Fatalf("%s: %+v, want allocated to the running %s in this boot", ip, e, cid)
		}
	}
}

// A reservation its StatefulSet kept (published held) comes back from the
// record held, following the StatefulSet the controller named for it,
// however long ago its own duration ended; its own duration is the
// network's longest (no checkpoint gives it).
func TestRebuildKeepsAHeldReservation(t *testing.T) {
	s := newScenario(t)
	ip, err := s.add("c-db-2", "apps", "db-2", 30*time.Minute)
	must(t, err)
	s.del("c-db-2")
	s.index.entries = append(s.index.entries, IndexEntry{Namespace: "apps", Identity: "db-2", Pod: "db-2",
		IPs: []netip.Addr{netip.MustParseAddr(ip)}, Since: s.now.Add(-30 * 24 * time.Hour), Held: true,
		StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "uid-db", Why: "kept while StatefulSet db keeps its claims"}})
	s.damaged = s.damage()
	if !s.b.Pass(context.Background()) {
		t.Fatal("not rebuilt")
	}
	got := s.entries()[ip]
	if !got.Held() || got.StatefulSet.Name != "db" || got.StatefulSet.UID != "uid-db" {
		t.Fatalf("db-2's reservation after the rebuild: %+v (follows %+v), want held for StatefulSet db (uid-db), as before the damage", got.Record, got.StatefulSet)
	}
	if got.Duration != contract.DefaultMaxDuration {
		t.Fatalf("its own duration %v, want the network's longest (%v)", got.Duration, contract.DefaultMaxDuration)
	}
	if ip2, err := s.start("c-new-x", "new-x", 0); err != nil || ip2 == ip {
		t.Fatalf("a new pod after the rebuild got %s (%v); db-2's %s is held", ip2, err, ip)
	}
}
