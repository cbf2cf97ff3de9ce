package admin

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func seed(t *testing.T, dir string) {
	t.Helper()
	now := time.Now()
	deadNetns := filepath.Join(t.TempDir(), "cni-dead") // its directory exists, the namespace does not
	err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error {
		web := reservation.Identity{Namespace: "default", Name: "web", IfName: "eth0"}
		for _, r := range []*reservation.Record{
			{IP: netip.MustParseAddr("10.0.0.2"), State: reservation.Reserved, Identity: web, Duration: time.Hour, RequestedDuration: 48 * time.Hour, Clamped: true, ExpiresAt: now.Add(time.Hour)},
			{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Allocated, ContainerID: "abc", IfName: "eth0", Netns: "/proc/self/ns/net",
				Identity: reservation.Identity{Namespace: "default", Name: "db", IfName: "eth0"}, Duration: time.Minute, DurationFrom: "namespace"},
			{IP: netip.MustParseAddr("10.0.0.4"), State: reservation.Allocated, ContainerID: "dead", IfName: "eth0", Netns: deadNetns},
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestListReleaseGCCheck(t *testing.T) {
	dir := t.TempDir()
	seed(t, dir)

	out, _, code := run(t, "--data-dir", dir, "list", "--json")
	var entries []Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil || code != 0 || len(entries) != 3 {
		t.Fatalf("list --json: code %d, %d entries, %v\n%s", code, len(entries), err, out)
	}
	if e := entries[0]; e.State != "reserved" || e.Name != "web" || !e.Clamped || e.RequestedDuration != "48h0m0s" || e.ExpiresAt == nil {
		t.Fatalf("reserved entry: %+v", e)
	}
	if e := entries[1]; e.Name != "db" || e.DurationFrom != "namespace" || entries[0].DurationFrom != "" {
		t.Fatalf("where the durations came from: %+v, %+v", entries[0], e)
	}
	out, _, _ = run(t, "list", "--data-dir", dir)
	if !strings.Contains(out, "1h0m0s (clamped from 48h0m0s)") || !strings.Contains(out, "1m0s (namespace default)") || !strings.Contains(out, "default/db") {
		t.Fatalf("table:\n%s", out)
	}

	// gc applies each network's own rules: without its config it changes nothing.
	emptyConfDir := t.TempDir()
	out, errOut, code := run(t, "--data-dir", dir, "gc", "--cni-conf-dir", emptyConfDir)
	if code != 0 || !strings.Contains(errOut, "cbr0: skipped, nothing changed") || !strings.Contains(errOut, emptyConfDir) || strings.Contains(out, "released") {
		t.Fatalf("gc without the network's config: %d %s%s; want cbr0 skipped, naming %s", code, out, errOut, emptyConfDir)
	}
	if _, _, code := run(t, "--data-dir", dir, "gc", "--cni-conf-dir", emptyConfDir, "--network", "cbr0"); code == 0 {
		t.Fatal("gc --network cbr0 without its config succeeded")
	}
	if got := stateIn(t, dir, "10.0.0.4"); got != "allocated" {
		t.Fatalf("10.0.0.4 is %q after a skipped gc, want allocated", got)
	}
	// With it, the dead sandbox's address cools by the configured reuse delay
	// (the plugin's DEL would make it cool too).
	confDir := writeConf(t, dir, `"reservation":{"reuseDelay":"10m"}`)
	before := time.Now()
	out, _, code = run(t, "--data-dir", dir, "gc", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(out, "released 1 allocations whose sandbox is gone") {
		t.Fatalf("gc: %d %s", code, out)
	}
	if e := listed(t, dir, "10.0.0.4"); e.State != "cooling" || e.ExpiresAt == nil || e.ExpiresAt.Before(before.Add(10*time.Minute-time.Second)) {
		t.Fatalf("10.0.0.4 after gc: %+v; want cooling for the configured 10m", e)
	}

	out, _, code = run(t, "--data-dir", dir, "release", "default/web")
	if code != 0 || !strings.Contains(out, "released 10.0.0.2") {
		t.Fatalf("release: %d %s", code, out)
	}
	out, _, _ = run(t, "--data-dir", dir, "list", "--json")
	if strings.Contains(out, "10.0.0.2") || !strings.Contains(out, "10.0.0.3") {
		t.Fatalf("after gc and release:\n%s", out)
	}
	// Released twice, or misspelt: nothing to do is exit 1, said, and
	// changes nothing.
	for _, id := range []string{"default/web", "default/wbe"} {
		out, _, code = run(t, "--data-dir", dir, "release", id)
		if code != 1 || out != "nothing recorded for "+id+"\n" {
			t.Fatalf("release %s with nothing recorded: exit %d, %q; want exit 1 and \"nothing recorded for %s\"", id, code, out, id)
		}
	}
	if out, _, _ = run(t, "--data-dir", dir, "list", "--json"); !strings.Contains(out, "10.0.0.3") {
		t.Fatalf("after releasing nothing:\n%s", out)
	}

	if out, _, code = run(t, "--data-dir", dir, "check"); code != 0 || !strings.Contains(out, ": ok") {
		t.Fatalf("check: %d %s", code, out)
	}
}

func TestCheckExplainsDamagedStore(t *testing.T) {
	dir := t.TempDir()
	seed(t, dir)
	db := filepath.Join(dir, boltstore.DBFile)
	if err := os.WriteFile(db, bytes.Repeat([]byte("garbage!"), 2048), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, "--data-dir", dir, "check")
	if code != 2 || !strings.Contains(out, "cannot be read") || !strings.Contains(out, "checkpointd rebuild-store") {
		t.Fatalf("check of a damaged store: code %d\n%s", code, out)
	}
	_, errOut, code := run(t, "--data-dir", dir, "list")
	if code != 2 || !strings.Contains(errOut, "has not modified it") {
		t.Fatalf("list of a damaged store: code %d\n%s", code, errOut)
	}
}

// A lost store (the file gone, the creation mark there) is not an empty
// one: the tool says so and lists nothing as if it were.
func TestCheckExplainsLostStore(t *testing.T) {
	dir := t.TempDir()
	seed(t, dir)
	if err := os.Remove(filepath.Join(dir, boltstore.DBFile)); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, "--data-dir", dir, "check")
	if code != 2 || !strings.Contains(out, "this node had one") || !strings.Contains(out, "checkpointd rebuild-store") {
		t.Fatalf("check of a lost store: code %d\n%s", code, out)
	}
	if _, errOut, code := run(t, "--data-dir", dir, "list"); code != 2 || !strings.Contains(errOut, "missing") {
		t.Fatalf("list of a lost store: code %d\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, boltstore.DBFile)); !os.IsNotExist(err) {
		t.Fatalf("the tool created a store in place of the lost one: %v", err)
	}
}

func TestImport(t *testing.T) {
	dir, hl := t.TempDir(), t.TempDir()
	_ = os.WriteFile(filepath.Join(hl, "10.5.0.7"), []byte("cid-7\r\neth0"), 0o600)
	_ = os.WriteFile(filepath.Join(hl, "last_reserved_ip.0"), []byte("10.5.0.7"), 0o600)
	out, _, code := run(t, "--data-dir", dir, "import", "--network", "cbr0", "--from", hl)
	if code != 0 || !strings.Contains(out, "imported 1 allocations") {
		t.Fatalf("import: %d %s", code, out)
	}
	out, _, _ = run(t, "--data-dir", dir, "list")
	if !strings.Contains(out, "10.5.0.7") || !strings.Contains(out, "(host-local)") {
		t.Fatalf("list after import:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"bogus"}, {"release"}, {"release", "noslash"}, {"import"}} {
		if _, _, code := run(t, append([]string{"--data-dir", t.TempDir()}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestStatusMatchesList: `stickyip status` reads the ranges from the CNI
// configs and counts what `stickyip list` shows, state by state.
// writeConf writes a conflist for network cbr0 keeping its records in
// dataDir, with extra keys in its ipam block, and returns its directory.
func writeConf(t *testing.T, dataDir, extra string) string {
	t.Helper()
	confDir := t.TempDir()
	conf := `{"cniVersion":"1.1.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"` + dataDir +
		`","hostLocalDataDir":"","subnet":"10.0.0.0/28",` + extra + `}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return confDir
}

// listed returns the `list --json` entry of ip (zero if not listed).
func listed(t *testing.T, dataDir, ip string) Entry {
	t.Helper()
	out, _, _ := run(t, "--data-dir", dataDir, "list", "--json")
	var entries []Entry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IP == ip {
			return e
		}
	}
	return Entry{}
}

func stateIn(t *testing.T, dataDir, ip string) string { return listed(t, dataDir, ip).State }

func TestStatusMatchesList(t *testing.T) {
	dir := t.TempDir()
	seed(t, dir) // 10.0.0.2 reserved, .3 and .4 allocated
	err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.5"), State: reservation.Cooling,
			ReleasedAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute)})
	})
	if err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	conf := `{"cniVersion":"1.1.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"` + dir + `","subnet":"10.0.0.0/28"}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := run(t, "status", "--cni-conf-dir", confDir, "--json")
	var pools []PoolStatus
	if err := json.Unmarshal([]byte(out), &pools); err != nil || code != 0 || len(pools) != 1 || len(pools[0].Sets) != 1 {
		t.Fatalf("status --json: code %d %v %s%s", code, err, out, errOut)
	}
	if want := filepath.Join(confDir, "10-cbr0.conflist"); pools[0].ConfigFile != want {
		t.Errorf("status --json configFile %q, want %q", pools[0].ConfigFile, want)
	}
	s := pools[0].Sets[0]
	listOut, _, _ := run(t, "--data-dir", dir, "list", "--json")
	var entries []Entry
	if err := json.Unmarshal([]byte(listOut), &entries); err != nil {
		t.Fatal(err)
	}
	byState := map[string]int{}
	for _, e := range entries {
		byState[e.State]++
	}
	// A /28 with its gateway (.1) hands out .2-.14: 13 addresses.
	if s.Size != 13 || s.Allocated != byState["allocated"] || s.Reserved != byState["reserved"] || s.Cooling != byState["cooling"] ||
		s.Free != 13-len(entries) || byState["cooling"] != 1 {
		t.Fatalf("status %+v, list by state %v", s, byState)
	}
	table, _, code := run(t, "status", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(table, "cbr0") || !strings.Contains(table, "COOLING") {
		t.Fatalf("status table: %d\n%s", code, table)
	}
	if _, errOut, code := run(t, "status", "--cni-conf-dir", confDir, "--network", "nope"); code != 2 || !strings.Contains(errOut, "nope") {
		t.Fatalf("unknown network: %d %s", code, errOut)
	}
}

// A store of an earlier stickyip may hold a record on a range's gateway
// (it granted requested gateways): check reports it with what to do, given
// the network's config; the same store with no config for the network, or
// one for another data directory, has nothing to check it against.
func TestCheckReportsRecordsOnUnassignableAddresses(t *testing.T) {
	dir := t.TempDir()
	err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error {
		for _, r := range []*reservation.Record{
			{IP: netip.MustParseAddr("10.0.0.1"), State: reservation.Allocated, ContainerID: "gw-holder", IfName: "eth0",
				Identity: reservation.Identity{Namespace: "tenant", Name: "x", IfName: "eth0"}},
			{IP: netip.MustParseAddr("10.0.0.15"), State: reservation.Reserved, Identity: reservation.Identity{Namespace: "tenant", Name: "y", IfName: "eth0"},
				Duration: time.Hour, ExpiresAt: time.Now().Add(time.Hour)},
			{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Allocated, ContainerID: "fine", IfName: "eth0"},
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	writeConf := func(dataDir string) {
		conf := `{"cniVersion":"1.1.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":"` + dataDir +
			`","subnet":"10.0.0.0/28","rangeEnd":"10.0.0.15"}}]}`
		if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, _, code := run(t, "--data-dir", dir, "check", "--cni-conf-dir", confDir); code != 0 || !strings.Contains(out, ": ok") {
		t.Fatalf("check without a config for cbr0: %d %s", code, out)
	}
	writeConf(t.TempDir())
	if out, _, code := run(t, "--data-dir", dir, "check", "--cni-conf-dir", confDir); code != 0 {
		t.Fatalf("check with cbr0 configured on another data directory: %d %s", code, out)
	}
	writeConf(dir)
	out, _, code := run(t, "--data-dir", dir, "check", "--cni-conf-dir", confDir)
	for _, want := range []string{"2 problems",
		"network cbr0 (" + filepath.Join(confDir, "10-cbr0.conflist") + "): 10.0.0.1 is the gateway of subnet 10.0.0.0/28 but in use by container gw-holder of pod tenant/x",
		"delete that pod",
		"10.0.0.15 is the broadcast address of subnet 10.0.0.0/28 but reserved for tenant/y", "`stickyip release tenant/y`"} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("check: exit %d, want 1 and %q in:\n%s", code, want, out)
		}
	}
	out, _, _ = run(t, "--data-dir", dir, "check", "--cni-conf-dir", confDir, "--json")
	var res []CheckResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 || res[0].OK || len(res[0].Problems) != 2 {
		t.Fatalf("check --json: %v %s", err, out)
	}
}

// A cooling address that only its last holder may ask for says who that is.
func TestListShowsCoolingLastHolder(t *testing.T) {
	dir := t.TempDir()
	err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.6"), State: reservation.Cooling,
			ReleasedAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute),
			LastIdentity: reservation.Identity{Namespace: "prod", Name: "db-0", IfName: "eth0"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if e := listed(t, dir, "10.0.0.6"); e.State != "cooling" || e.LastPod != "prod/db-0" || e.Name != "" {
		t.Fatalf("list --json of a cooling address: %+v, want lastPod prod/db-0 and no holder", e)
	}
	out, _, _ := run(t, "list", "--data-dir", dir)
	if !strings.Contains(out, "(was prod/db-0)") {
		t.Fatalf("list does not name the cooling address's last holder:\n%s", out)
	}
}

// After the node's pod CIDR changed, `stickyip status` says which range is
// no longer the node's (as recorded by checkpointd), in the table and in
// --json.
func TestStatusShowsRetiredNodeRange(t *testing.T) {
	dir := t.TempDir()
	confDir := writeConf(t, dir, `"reservation":{}`)
	conf, err := ipam.LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"cbr0","ipam":{"type":"stickyip","subnet":"10.0.0.0/28"}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	e := ipam.NewEngine(conf, ipam.Env{})
	for _, cidr := range []string{"10.0.0.0/28", "10.0.3.0/28"} {
		err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error {
			_, _, err := e.SetNodeRanges(tx, []netip.Prefix{netip.MustParsePrefix(cidr)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	table, _, code := run(t, "status", "--cni-conf-dir", confDir)
	if code != 0 || !strings.Contains(table, "no longer [10.0.0.0/28]") {
		t.Errorf("status table does not name the retired range:\n%s", table)
	}
	out, _, _ := run(t, "status", "--cni-conf-dir", confDir, "--json")
	var pools []PoolStatus
	if err := json.Unmarshal([]byte(out), &pools); err != nil || len(pools) != 1 || pools[0].NodeRanges == nil ||
		len(pools[0].NodeRanges.Retired) != 1 || pools[0].NodeRanges.Retired[0].String() != "10.0.0.0/28" {
		t.Errorf("status --json: %s (%v)", out, err)
	}
}

// `stickyip list` says what would end each reservation, in the table's
// KEEP column and in --json (retention, statefulSet, keep): one its
// StatefulSet holds (stickyip-controller's account, no expiry, its own
// duration's end said apart), one whose hold ended (following stopped,
// the pod ran on another node since), a fixed one.
func TestListShowsWhatWouldEndIt(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	id := func(name string) reservation.Identity {
		return reservation.Identity{Namespace: "prod", Name: name, IfName: "eth0"}
	}
	held := "held while StatefulSet db (uid u) exists: its volume claim belongs to it (whenDeleted: Delete)"
	recs := []*reservation.Record{
		{IP: netip.MustParseAddr("10.0.0.2"), State: reservation.Reserved, Identity: id("db-2"), Duration: 10 * time.Minute,
			StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "u", Why: held},
			AllocatedAt: now, ReleasedAt: now.Add(-time.Hour), ExpiresAt: now.Add(-50 * time.Minute)},
		{IP: netip.MustParseAddr("10.0.0.3"), State: reservation.Reserved, Identity: id("db-3"), Duration: 10 * time.Minute,
			StatefulSet: &reservation.StatefulSetRef{Name: "db", EndedAt: now, Why: "following StatefulSets is off"},
			AllocatedAt: now, ReleasedAt: now, ExpiresAt: now.Add(10 * time.Minute)},
		{IP: netip.MustParseAddr("10.0.0.4"), State: reservation.Reserved, Identity: id("web"), Duration: 10 * time.Minute,
			Retention: "fixed", DurationFrom: "namespace", AllocatedAt: now, ReleasedAt: now, ExpiresAt: now.Add(10 * time.Minute)},
		{IP: netip.MustParseAddr("10.0.0.6"), State: reservation.Reserved, Identity: id("db-6"), Duration: 10 * time.Minute,
			StatefulSet: &reservation.StatefulSetRef{Name: "db", EndedAt: now, MovedTo: "another node", Why: "another node ran the pod since"},
			AllocatedAt: now, ReleasedAt: now, ExpiresAt: now.Add(10 * time.Minute)},
		{IP: netip.MustParseAddr("10.0.0.5"), State: reservation.Allocated, ContainerID: "c5", Identity: id("db-0"), Duration: time.Hour,
			StatefulSet: &reservation.StatefulSetRef{Name: "db", UID: "u"}, AllocatedAt: now},
	}
	if err := boltstore.New(dir, 0).Update("cbr0", func(tx reservation.Txn) error { return tx.PutAll(recs) }); err != nil {
		t.Fatal(err)
	}
	from := now.Format(time.RFC3339)
	for _, tc := range []struct {
		ip, retention, keep string
		expires, ends       bool
	}{
		{"10.0.0.2", "statefulset", "StatefulSet db: " + held + " (10m0s once following stops)", false, true},
		{"10.0.0.3", "fixed", "10m0s from " + from + ": following StatefulSets is off (StatefulSet db)", true, false},
		{"10.0.0.4", "fixed", "10m0s (fixed)", true, false},
		{"10.0.0.6", "fixed", "10m0s from " + from + ": another node ran the pod since (StatefulSet db)", true, false},
		{"10.0.0.5", "statefulset", "while StatefulSet db keeps the pod's volume claim, as stickyip-controller says (1h0m0s once following stops)", false, false},
	} {
		e := listed(t, dir, tc.ip)
		if e.Retention != tc.retention || e.Keep != tc.keep || (e.ExpiresAt != nil) != tc.expires || (e.DurationEndsAt != nil) != tc.ends {
			t.Errorf("list --json %s: retention %q, keep %q, expiresAt %v, durationEndsAt %v; want %q, %q, %v, %v",
				tc.ip, e.Retention, e.Keep, e.ExpiresAt, e.DurationEndsAt, tc.retention, tc.keep, tc.expires, tc.ends)
		}
	}
	if e := listed(t, dir, "10.0.0.2"); e.StatefulSet == nil || e.StatefulSet.UID != "u" || e.StatefulSet.Why != held {
		t.Errorf("list --json: statefulSet %+v, want StatefulSet db with its UID and the controller's account", e.StatefulSet)
	}
	out, _, _ := run(t, "list", "--data-dir", dir)
	for _, want := range []string{
		"StatefulSet db: " + held, "not while retained (its duration ends",
		"following StatefulSets is off (StatefulSet db)",
		"10m0s (fixed) (namespace default)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list table lacks %q:\n%s", want, out)
		}
	}
}
