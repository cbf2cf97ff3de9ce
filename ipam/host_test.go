package ipam

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/test/harness/strict"
)

func TestNetnsGoneIsConservative(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "cni-unmounted")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		gone bool
		why  string
	}{
		{"/proc/self/ns/net", false, "a live namespace"},
		{filepath.Join(dir, "cni-removed"), true, "removed from a directory that exists"},
		{filepath.Join(dir, "no-such-dir", "cni-x"), false, "directory invisible: maybe another mount namespace"},
		{plain, false, "a plain file: the caller may not see the runtime's bind mount"},
	} {
		if got := NetnsGone(tc.path); got != tc.gone {
			t.Errorf("%s (%s): gone=%v, want %v", tc.path, tc.why, got, tc.gone)
		}
	}
}

func TestImportedAllocationReleasedWhenHostLocalFreesIt(t *testing.T) {
	netDir := filepath.Join(t.TempDir(), "net1")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(netDir, "10.1.0.2")
	if err := os.WriteFile(file, []byte("old-pod\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, v4Small)
	w.eng.hostLocalDir = netDir
	// The real check for host-local's files; the test's pod sandboxes stay alive.
	w.eng.env.SandboxGone = func(p string) bool { return filepath.Dir(p) == netDir && NetnsGone(p) }
	w.mustAdd("c1", anon(1)) // imports .2
	sweep := func() int {
		var n int
		if err := w.store.Update("net1", func(tx reservation.Txn) (err error) { _, n, err = w.eng.Sweep(tx); return err }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := sweep(); n != 0 || w.stateOf("10.1.0.2") == "" {
		t.Fatalf("host-local still has the pod, but sweep released %d", n)
	}
	// The old pod's DEL went to host-local (flannel replays the ADD-time config).
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if n := sweep(); n != 1 || w.stateOf("10.1.0.2") != "" {
		t.Fatalf("after host-local freed it: released %d, state %q", n, w.stateOf("10.1.0.2"))
	}
}

// TestBootID: bootID reads what os.ReadFile reads, trimmed.
func TestBootID(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		strict.Missing(t, "%v", err)
	}
	if got, want := bootID(), strings.TrimSpace(string(b)); got != want || len(got) != 36 {
		t.Fatalf("bootID() = %q, want %q", got, want)
	}
}

// TestBootTime: the boot's start is /proc/stat's btime, in UTC.
func TestBootTime(t *testing.T) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		strict.Missing(t, "%v", err)
	}
	var want int64 = -1
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if want, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := bootTime(); got.Unix() != want || got.Location() != time.UTC {
		t.Fatalf("bootTime() = %v, want btime %d in UTC", got, want)
	}
}
