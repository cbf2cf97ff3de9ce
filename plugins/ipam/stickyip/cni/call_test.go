package cni

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// dualStack is a call's config with an IPv4 and an IPv6 range set.
func dualStack(t *testing.T, resolvConf string) *ipam.Config {
	t.Helper()
	block := map[string]any{"type": "stickyip", "dataDir": t.TempDir(), "hostLocalDataDir": "", "resolvConf": resolvConf,
		"ranges": []any{[]any{map[string]string{"subnet": "10.77.0.0/29"}}, []any{map[string]string{"subnet": "fd77::/125"}}}}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "testnet", "type": "bridge", "ipam": block})
	conf, err := ipam.LoadConfig(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func records(addrs ...string) []*reservation.Record {
	var out []*reservation.Record
	for _, a := range addrs {
		out = append(out, &reservation.Record{IP: netip.MustParseAddr(a)})
	}
	return out
}

// TestResult: each address of an ADD comes back with the prefix length and
// gateway of the range set holding it, with the DNS of ipam.resolvConf; an
// address no range holds any more, or a resolvConf that cannot be read,
// fails the ADD naming it.
func TestResult(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.96.0.10\nsearch svc.cluster.local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Call{Conf: dualStack(t, resolv)}
	res, err := c.Result(records("10.77.0.2", "fd77::3"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ip := range res.IPs {
		got = append(got, ip.Address.String()+" via "+ip.Gateway.String())
	}
	if want := []string{"10.77.0.2/29 via 10.77.0.1", "fd77::3/125 via fd77::1"}; !slices.Equal(got, want) {
		t.Fatalf("result addresses %v, want %v", got, want)
	}
	if !slices.Equal(res.DNS.Nameservers, []string{"10.96.0.10"}) || !slices.Equal(res.DNS.Search, []string{"svc.cluster.local"}) {
		t.Fatalf("result DNS %+v, want resolv.conf's", res.DNS)
	}

	if res, err := (&Call{Conf: dualStack(t, "")}).Result(records("10.77.0.2")); err != nil || !res.DNS.IsEmpty() {
		t.Fatalf("without resolvConf: DNS %+v (%v), want none", res.DNS, err)
	}
	if _, err := c.Result(records("10.78.0.2")); !errors.Is(err, ipam.ErrInvalidConfig) || !strings.Contains(err.Error(), "10.78.0.2") {
		t.Fatalf("an address outside every range: %v, want a config error naming it", err)
	}
	gone := &Call{Conf: dualStack(t, filepath.Join(t.TempDir(), "missing"))}
	if _, err := gone.Result(records("10.77.0.2")); !errors.Is(err, ipam.ErrInvalidConfig) || !strings.Contains(err.Error(), "ipam.resolvConf") {
		t.Fatalf("resolvConf missing: %v, want a config error naming ipam.resolvConf", err)
	}
}

// TestPrevResultIPs: CHECK compares the store with the addresses of its
// prevResult; a config without one has none, and one that does not parse
// is a config error.
func TestPrevResultIPs(t *testing.T) {
	prev := `{"cniVersion":"1.1.0","ips":[{"address":"10.77.0.2/29"},{"address":"fd77::3/125"}]}`
	for _, tc := range []struct {
		name, stdin string
		want        []string
		wantErr     bool
	}{
		{name: "prevResult", stdin: `{"cniVersion":"1.1.0","name":"n","prevResult":` + prev + `}`, want: []string{"10.77.0.2", "fd77::3"}},
		{name: "an older version's prevResult", stdin: `{"cniVersion":"0.4.0","name":"n","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.77.0.2/29"}]}}`, want: []string{"10.77.0.2"}},
		{name: "none", stdin: `{"cniVersion":"1.1.0","name":"n"}`},
		{name: "not JSON", stdin: `{"cniVersion":`, wantErr: true},
		{name: "prevResult of an unknown version", stdin: `{"cniVersion":"9.9.9","name":"n","prevResult":` + prev + `}`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Call{Args: cmdArgs([]byte(tc.stdin))}
			addrs, err := c.PrevResultIPs()
			var got []string
			for _, a := range addrs {
				got = append(got, a.String())
			}
			if tc.wantErr != errors.Is(err, ipam.ErrInvalidConfig) || !slices.Equal(got, tc.want) {
				t.Fatalf("%v (%v), want %v, a config error: %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestHealth: STATUS answers code 50 with the reason and what to do when
// the store cannot serve an ADD; a store another process holds is healthy,
// and STATUS waits for it at most two seconds however long
// ipam.lockTimeout is (the runtime polls STATUS, and would time out).
func TestHealth(t *testing.T) {
	conf := dualStack(t, "")
	if err := (&Call{Conf: conf}).Health(); err != nil {
		t.Fatalf("a new node's store: %v", err)
	}

	notDir := dualStack(t, "")
	notDir.DataDir = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir.DataDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var te *types.Error
	if err := (&Call{Conf: notDir}).Health(); !errors.As(err, &te) || te.Code != CodeUnavailable ||
		!strings.Contains(te.Msg, "is not a directory") || !strings.Contains(te.Details, "ipam.dataDir") {
		t.Fatalf("a data directory that is a file: %#v, want code 50 naming it, with a hint on ipam.dataDir", err)
	}

	held := dualStack(t, "")
	held.LockTimeout = time.Minute
	if err := boltstore.New(held.DataDir, 0).Update("testnet", func(reservation.Txn) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(held.DataDir, boltstore.LockFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = (&Call{Conf: held}).Health()
	// The store's own lock timeout (10 s) is the bound a broken STATUS
	// would wait for.
	if took := time.Since(start); err != nil || took > 6*time.Second {
		t.Fatalf("with the store held by another process: %v after %v, want healthy within about %v", err, took, statusLockWait)
	}
}

// TestStatusError: STATUS's error says what the operator does next for
// each kind of damage.
func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		hint string
	}{
		{reservation.ErrCorrupt, "the file was not modified"},
		{reservation.ErrLost, "checkpointd rebuilds the store"},
		{reservation.ErrFutureSchema, "a newer one"},
		{reservation.ErrIO, "ipam.dataDir"},
		{errors.New("other"), ""},
	} {
		e := StatusError(tc.err)
		if e.Code != CodeUnavailable || e.Msg != "stickyip cannot allocate addresses on this node: "+tc.err.Error() ||
			!strings.Contains(e.Details, tc.hint) || (tc.hint == "") != (e.Details == "") {
			t.Errorf("%v: %#v, want code 50 with a hint saying %q", tc.err, e, tc.hint)
		}
	}
}
