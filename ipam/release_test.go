package ipam

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// An allocation whose sandbox the runtime does not list
// is released only when its sandbox is gone (network namespace missing, or a
// previous boot); anything in doubt counts as alive. Released addresses cool
// by the network's reuse delay.
func TestReleaseIfGone(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.1.0.0/29","reservation":{"reuseDelay":"30s"}}`)
	w.eng = NewEngine(w.conf, w.eng.env) // the configured reuse delay, not the tests' 0
	alive := w.mustAdd("cnitool", anon(1))[0]
	dead := w.mustAdd("gone", anon(2))[0]
	kept := w.mustAdd("gone-web", web)[0]
	w.dead["/run/netns/gone"], w.dead["/run/netns/gone-web"] = true, true

	release := func(cid string) int {
		t.Helper()
		var n int
		err := w.store.Update("net1", func(tx reservation.Txn) (err error) { n, err = w.eng.ReleaseIfGone(tx, cid, "eth0"); return err })
		if err != nil {
			t.Fatalf("ReleaseIfGone(%s): %v", cid, err)
		}
		return n
	}
	if n := release("cnitool"); n != 0 || w.stateOf(alive) != reservation.Allocated {
		t.Fatalf("sandbox with a live netns: released %d, state %q; want kept allocated", n, w.stateOf(alive))
	}
	if n := release("gone"); n != 1 || w.stateOf(dead) != reservation.Cooling {
		t.Fatalf("sandbox whose netns is gone: released %d, state %q; want cooling", n, w.stateOf(dead))
	}
	for _, r := range w.records() {
		if r.IP.String() == dead && !r.ExpiresAt.Equal(w.now.Add(30*time.Second)) {
			t.Fatalf("cooling until %v, want the configured reuse delay (now+30s)", r.ExpiresAt)
		}
	}
	if n := release("gone-web"); n != 1 || w.stateOf(kept) != reservation.Reserved {
		t.Fatalf("annotated sandbox whose netns is gone: released %d, state %q; want reserved", n, w.stateOf(kept))
	}
	if n := release("unknown"); n != 0 {
		t.Fatalf("unknown container: released %d", n)
	}

	// After a reboot every allocation of the previous boot is dead, even if a
	// path of the same name exists again; it cooled from the boot on (an
	// hour ago, longer than the delay), so it is free.
	w.eng.env.BootID = "boot-2"
	if n := release("cnitool"); n != 1 || w.stateOf(alive) != "" {
		t.Fatalf("previous boot's sandbox: released %d, state %q; want free", n, w.stateOf(alive))
	}
}

// Finding 4: the engine of `stickyip gc` and checkpointd comes from the
// network's own config; a network without one (or configured with another
// data dir) gets no engine, so its records are never changed by other rules.
func TestNetworkEngine(t *testing.T) {
	confDir, dataDir := t.TempDir(), t.TempDir()
	conf := `{"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"bridge","ipam":{"type":"stickyip","subnet":"10.1.0.0/29",
		"dataDir":"` + dataDir + `","hostLocalDataDir":"","reservation":{"reuseDelay":"45s","poolFull":"fail"}}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-net1.conflist"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := NetworkEngine(confDir, "net1", dataDir+"/", Env{})
	if err != nil {
		t.Fatal(err)
	}
	if e.reuseDelay != 45*time.Second || e.policy != PoolFullFail || len(e.rangeSets) != 1 {
		t.Fatalf("engine: reuseDelay %v, policy %q, %d range sets; want the config's 45s, fail, 1", e.reuseDelay, e.policy, len(e.rangeSets))
	}
	for _, tc := range []struct{ network, dataDir, mention string }{
		{"other", dataDir, "other is not configured in " + confDir},
		{"net1", t.TempDir(), "keeps its records in " + dataDir},
	} {
		if _, err := NetworkEngine(confDir, tc.network, tc.dataDir, Env{}); !errors.Is(err, ErrNoNetworkConfig) || !strings.Contains(err.Error(), tc.mention) ||
			strings.Contains(err.Error(), "skipped files") {
			t.Errorf("NetworkEngine(%s, %s): %v; want ErrNoNetworkConfig mentioning %q, and no skipped file", tc.network, tc.dataDir, err, tc.mention)
		}
	}
	// A file skipped may have configured the network: the error names it.
	broken := filepath.Join(confDir, "20-other.conflist")
	if err := os.WriteFile(broken, []byte(`{"name":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NetworkEngine(confDir, "other", dataDir, Env{}); !errors.Is(err, ErrNoNetworkConfig) || !strings.Contains(err.Error(), "(skipped files: "+broken) {
		t.Errorf("network other with a file skipped: %v, want the skipped file named", err)
	}
}
