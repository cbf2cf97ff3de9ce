package ipamstore

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

var now = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

func seed(t *testing.T, dir string, recs ...*reservation.Record) {
	t.Helper()
	s := boltstore.New(dir, 2*time.Second)
	err := s.Update("cbr0", func(tx reservation.Txn) error {
		for _, r := range recs {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		problems, err := s.Check()
		if err != nil || len(problems) > 0 {
			t.Errorf("store invariants at cleanup: %v %v", err, problems)
		}
	})
}

func rec(ip, state, cid, ns, name string, dur time.Duration) *reservation.Record {
	r := &reservation.Record{
		IP: netip.MustParseAddr(ip), State: reservation.State(state), ContainerID: cid, IfName: "eth0",
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, Duration: dur,
		AllocatedAt: now.Add(-time.Hour), BootID: "boot-1",
	}
	if r.State == reservation.Reserved {
		r.ContainerID, r.IfName = "", ""
		r.ExpiresAt = now.Add(time.Hour)
	}
	return r
}

func newStore(dir string) *Store {
	return NewWithEnv(dir, 2*time.Second, ipam.Env{Now: func() time.Time { return now }, BootID: "boot-1", SandboxGone: ipam.NetnsGone})
}

func byIP(t *testing.T, s *Store) map[string]reservation.Entry {
	t.Helper()
	all, err := s.Entries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]reservation.Entry{}
	for _, a := range all {
		out[a.IP.String()] = a
	}
	return out
}

func TestAllocationsAndRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	gone := filepath.Join(t.TempDir(), "cni-gone") // its directory exists, the namespace does not
	withNetns := func(r *reservation.Record, netns string) *reservation.Record { r.Netns = netns; return r }
	seed(t, dir,
		withNetns(rec("10.244.1.2", "allocated", "sb-keep", "default", "web", 5*time.Minute), gone),
		withNetns(rec("10.244.1.3", "allocated", "sb-plain", "default", "plain", 0), gone),
		rec("10.244.1.4", "reserved", "", "default", "gone", 5*time.Minute),
		rec("10.244.1.5", "reserved", "", "default", "other", 5*time.Minute),
		// cnitool's, or another runtime's: unknown to the CRI, its namespace alive.
		withNetns(rec("10.244.1.6", "allocated", "sb-other-runtime", "default", "nerd", 0), "/proc/self/ns/net"),
	)
	s := newStore(dir).WithCNIConfDir(writeConf(t, "cbr0", dir, `"reservation":{"reuseDelay":"1m"}`))
	got := byIP(t, s)
	if len(got) != 5 {
		t.Fatalf("%d entries, want 5: %+v", len(got), got)
	}
	a := got["10.244.1.2"]
	if a.Network != "cbr0" || a.State != reservation.Allocated || a.ContainerID != "sb-keep" || a.IfName != "eth0" ||
		a.Identity.Pod() != "default/web" || !a.AllocatedAt.Equal(now.Add(-time.Hour)) {
		t.Errorf("allocation = %+v", a)
	}

	// Without the network's config nothing is released (its rules unknown).
	bare := newStore(dir)
	if released, err := bare.ReleaseContainer("cbr0", "sb-plain", "eth0"); released || !errors.Is(err, ipam.ErrNoNetworkConfig) {
		t.Fatalf("release without a CNI config dir: %v, %v; want ErrNoNetworkConfig", released, err)
	}

	// DEL of a leaked sandbox whose namespace is gone: with a duration the IP
	// becomes a reservation, without one it cools by the network's reuse delay.
	for _, cid := range []string{"sb-keep", "sb-plain"} {
		if released, err := s.ReleaseContainer("cbr0", cid, "eth0"); err != nil || !released {
			t.Fatalf("release %s: %v, %v; want released", cid, released, err)
		}
	}
	// A sandbox whose namespace still exists keeps its address.
	if released, err := s.ReleaseContainer("cbr0", "sb-other-runtime", "eth0"); err != nil || released {
		t.Fatalf("release of a sandbox with a live namespace: %v, %v; want kept", released, err)
	}
	got = byIP(t, s)
	if r := got["10.244.1.2"]; r.State != reservation.Reserved || r.Identity.Name != "web" || !r.ExpiresAt.Equal(now.Add(5*time.Minute)) {
		t.Errorf("after DEL: %+v, want reserved for default/web until now+5m", r)
	}
	if r := got["10.244.1.3"]; r.State != reservation.Cooling || !r.ExpiresAt.Equal(now.Add(time.Minute)) {
		t.Errorf("allocation without duration after DEL: %+v, want cooling until now+1m (the configured reuse delay)", r)
	}
	if r := got["10.244.1.6"]; r.State != reservation.Allocated || r.ContainerID != "sb-other-runtime" {
		t.Errorf("allocation with a live namespace: %+v, want still allocated", r)
	}

	// Reservations of other pods are never touched by checkpointd.
	for _, ip := range []string{"10.244.1.4", "10.244.1.5"} {
		if r := got[ip]; r.State != reservation.Reserved {
			t.Errorf("%s: %+v, want still reserved", ip, r)
		}
	}
}

// writeConf writes a conflist of network keeping its records in dataDir,
// with extra keys in its ipam block, and returns its directory.
func writeConf(t *testing.T, network, dataDir, extra string) string {
	t.Helper()
	confDir := t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"` + network + `","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"` + dataDir +
		`","hostLocalDataDir":"","subnet":"10.244.1.0/24",` + extra + `}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-"+network+".conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return confDir
}

func TestMissingStoreIsEmpty(t *testing.T) {
	s := newStore(filepath.Join(t.TempDir(), "never-created"))
	all, err := s.Entries()
	if err != nil || len(all) != 0 {
		t.Errorf("Entries on a missing store = %v, %v; want empty, nil", all, err)
	}
}

func TestFreeFromCNIConfig(t *testing.T) {
	confDir := t.TempDir()
	subnetEnv := filepath.Join(t.TempDir(), "subnet.env")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "stickyip")
	// cbr0: flannel fills the range from its subnet file (10.244.1.0/24:
	// .1 is the gateway, .2-.254 are handed out: 253 addresses).
	write(filepath.Join(confDir, "10-flannel.conflist"), `{"cniVersion":"0.3.1","name":"cbr0","plugins":[
	  {"type":"flannel","subnetFile":"`+subnetEnv+`","ipam":{"type":"stickyip","dataDir":"`+dir+`"},"delegate":{"isDefaultGateway":true}},
	  {"type":"portmap","capabilities":{"portMappings":true}}]}`)
	write(subnetEnv, "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
	// br: explicit range .10-.19 (10 addresses, gateway .1 outside).
	write(filepath.Join(confDir, "20-bridge.conflist"), `{"cniVersion":"1.0.0","name":"br","plugins":[
	  {"type":"bridge","ipam":{"type":"stickyip","dataDir":"`+dir+`","ranges":[[{"subnet":"10.99.0.0/24","rangeStart":"10.99.0.10","rangeEnd":"10.99.0.19"}]]}}]}`)
	// Not ours.
	write(filepath.Join(confDir, "30-other.conf"), `{"cniVersion":"1.0.0","name":"other","type":"bridge","ipam":{"type":"host-local","subnet":"10.98.0.0/24"}}`)
	write(filepath.Join(confDir, "40-broken.conflist"), `{not json`)

	expired := rec("10.244.1.5", "reserved", "", "default", "c", time.Minute)
	expired.ExpiresAt = now.Add(-time.Second)
	seed(t, dir,
		rec("10.244.1.2", "allocated", "a", "default", "a", 0),
		rec("10.244.1.3", "reserved", "", "default", "b", time.Minute),
		&reservation.Record{IP: netip.MustParseAddr("10.244.1.4"), State: reservation.Cooling,
			AllocatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(20 * time.Second)},
		expired, // free: the next write drops it
		rec("10.244.9.2", "allocated", "old", "default", "old", 0), // a former lease's subnet
	)
	s := newStore(dir).WithCNIConfDir(confDir)
	pools, err := s.Pools()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ipam.PoolTotals{
		"cbr0": {Size: 253, Allocated: 1, Reserved: 1, Cooling: 1, Free: 250, Outside: 1},
		"br":   {Size: 10, Free: 10},
	}
	if !maps.Equal(pools, want) {
		t.Errorf("Pools = %+v, want %+v", pools, want)
	}
}
