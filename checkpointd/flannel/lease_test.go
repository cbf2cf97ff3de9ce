package flannel

import (
	"github.com/stickyip/stickyip/contract"

	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const lease1 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
const lease2 = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

type node struct {
	t      *testing.T
	run    string // /run of the node (tmpfs: emptied by a reboot)
	disk   string // persistent disk
	keeper *Keeper
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{t: t, run: filepath.Join(t.TempDir(), "run"), disk: t.TempDir()}
	n.boot()
	return n
}

// boot empties /run and starts a fresh keeper, as a reboot does.
func (n *node) boot() {
	n.t.Helper()
	if err := os.RemoveAll(n.run); err != nil {
		n.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(n.run, "stickyip"), 0o700); err != nil {
		n.t.Fatal(err)
	}
	n.keeper = &Keeper{
		SubnetFile: filepath.Join(n.run, "flannel", "subnet.env"),
		SavedFile:  filepath.Join(n.disk, SavedFileName),
		MarkerFile: filepath.Join(n.run, "stickyip", MarkerFileName),
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// flanneld writes its lease the way flanneld does: temporary file, rename.
func (n *node) flanneld(content string) {
	n.t.Helper()
	if err := os.MkdirAll(filepath.Dir(n.keeper.SubnetFile), 0o755); err != nil {
		n.t.Fatal(err)
	}
	tmp := n.keeper.SubnetFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Rename(tmp, n.keeper.SubnetFile); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) step(want Outcome) {
	n.t.Helper()
	got, err := n.keeper.Step(true)
	if err != nil || got != want {
		n.t.Fatalf("Step = %s, %v; want %s", got, err, want)
	}
}

func (n *node) subnetFile() string {
	b, err := os.ReadFile(n.keeper.SubnetFile)
	if err != nil {
		return "missing: " + err.Error()
	}
	return string(b)
}

func TestLeaseKeptAcrossReboot(t *testing.T) {
	n := newNode(t)
	n.step(None) // nothing written, nothing saved: nothing invented
	if _, err := os.Stat(n.keeper.SubnetFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a lease appeared from nowhere: %v", err)
	}
	n.flanneld(lease1)
	n.step(Saved)
	n.step(Current)

	// Power cut: /run is empty. While the API server answers (flanneld is
	// about to write the current lease, which may be another), nothing is
	// put back.
	n.boot()
	if got, err := n.keeper.Step(false); got != None || err != nil {
		t.Fatalf("Step with the API server reachable = %s, %v; want none", got, err)
	}
	if _, err := os.Stat(n.keeper.SubnetFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a lease was put back while flanneld can get its own: %v", err)
	}
	// The API server stays away for the grace period: put back.
	n.step(Restored)
	if got := n.subnetFile(); got != lease1 {
		t.Fatalf("put back %q, want the last lease", got)
	}
	if st, _ := os.Stat(n.keeper.SubnetFile); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 as flanneld writes it", st.Mode().Perm())
	}
	n.step(Ours)

	// flanneld reaches the API server and writes its own file: it owns it.
	n.flanneld(lease1)
	n.step(Current)
	if _, err := os.Stat(n.keeper.MarkerFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker left after flanneld took the file over: %v", err)
	}
}

func TestChangedLeaseIsSavedAndNeverOverwritten(t *testing.T) {
	n := newNode(t)
	n.flanneld(lease1)
	n.step(Saved)
	n.boot()
	n.step(Restored)
	// flanneld comes back with another subnet (the node's lease changed).
	n.flanneld(lease2)
	n.step(Saved)
	if got := n.subnetFile(); got != lease2 {
		t.Fatalf("flanneld's file was changed: %q", got)
	}
	// The next reboot puts back the new lease, never the old one.
	n.boot()
	n.step(Restored)
	if got := n.subnetFile(); got != lease2 {
		t.Fatalf("after the next reboot: %q, want the latest lease", got)
	}
}

func TestFlanneldWinsARace(t *testing.T) {
	n := newNode(t)
	n.flanneld(lease1)
	n.step(Saved)
	n.boot()
	// flanneld writes between the keeper's check and its write: simulate by
	// writing while Check runs.
	n.keeper.Check = func(contract.FlannelLease) error { n.flanneld(lease2); return nil }
	if _, err := n.keeper.Step(true); err != nil {
		t.Fatal(err)
	}
	if got := n.subnetFile(); got != lease2 {
		t.Fatalf("the keeper overwrote flanneld's file: %q", got)
	}
}

func TestLeaseNotMatchingTheIPAMIsNotPutBack(t *testing.T) {
	n := newNode(t)
	n.flanneld(lease1)
	n.step(Saved)
	n.boot()
	n.keeper.Check = func(l contract.FlannelLease) error {
		if !l.Contains(netip.MustParseAddr("10.244.7.9")) {
			return errors.New("the IPAM's last allocation 10.244.7.9 is outside it")
		}
		return nil
	}
	got, err := n.keeper.Step(true)
	if got != Refused || err == nil || !strings.Contains(err.Error(), "10.244.7.9") {
		t.Fatalf("Step = %s, %v; want refused naming the address", got, err)
	}
	if _, err := os.Stat(n.keeper.SubnetFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused lease was written: %v", err)
	}
}

func TestDamagedSavedLeaseIsNotUsed(t *testing.T) {
	n := newNode(t)
	n.flanneld(lease1)
	n.step(Saved)
	b, _ := os.ReadFile(n.keeper.SavedFile)
	if err := os.WriteFile(n.keeper.SavedFile, []byte(strings.Replace(string(b), "10.244.1.1", "10.244.9.1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	n.boot()
	if got, err := n.keeper.Step(true); err == nil || got == Restored {
		t.Fatalf("tampered saved lease: %s, %v; want an error", got, err)
	}
	if _, err := os.Stat(n.keeper.SubnetFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a tampered lease was put back")
	}
}

func TestInvalidCurrentFileIsNotSaved(t *testing.T) {
	n := newNode(t)
	n.flanneld(lease1)
	n.step(Saved)
	n.flanneld("FLANNEL_SUBNET=banana\n")
	if _, err := n.keeper.Step(true); !errors.Is(err, contract.ErrInvalidFlannelLease) {
		t.Fatalf("err %v, want ErrInvalid", err)
	}
	b, _ := os.ReadFile(n.keeper.SavedFile)
	if !strings.Contains(string(b), "10.244.1.1/24") {
		t.Fatal("the good saved lease was replaced by an invalid one")
	}
}
