package boot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSeenSurvivesRestartsWithinABoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	tr, err := Open(dir, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Fresh() || tr.Seen("default/web") {
		t.Fatalf("first open: fresh=%t seen=%t", tr.Fresh(), tr.Seen("default/web"))
	}
	if err := tr.MarkSeen("default/web", "kube-system/dns", "default/web"); err != nil {
		t.Fatal(err)
	}
	// checkpointd restarts in the same boot: the list is still there.
	again, err := Open(dir, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if again.Fresh() || !again.Seen("default/web") || !again.Seen("kube-system/dns") || again.Seen("default/db") {
		t.Fatalf("after a restart: fresh=%t web=%t dns=%t db=%t", again.Fresh(), again.Seen("default/web"), again.Seen("kube-system/dns"), again.Seen("default/db"))
	}
	if st, err := os.Stat(filepath.Join(dir, FileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("tracker file: %v %v", st, err)
	}
}

func TestNewKernelBootStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	tr, _ := Open(dir, "boot-1")
	_ = tr.MarkSeen("default/web")
	// The file survived (the directory is not on tmpfs) but the kernel booted again.
	next, err := Open(dir, "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	if !next.Fresh() || next.Seen("default/web") {
		t.Fatalf("after a reboot: fresh=%t seen=%t", next.Fresh(), next.Seen("default/web"))
	}
}

func TestEmptiedRunDirIsANewBoot(t *testing.T) {
	dir := t.TempDir()
	tr, _ := Open(dir, "same-kernel")
	_ = tr.MarkSeen("default/web")
	if err := os.Remove(filepath.Join(dir, FileName)); err != nil { // tmpfs cleared by a power cut
		t.Fatal(err)
	}
	next, err := Open(dir, "same-kernel")
	if err != nil || !next.Fresh() || next.Seen("default/web") {
		t.Fatalf("after the run dir was emptied: %v fresh=%t", err, next.Fresh())
	}
}

func TestDamagedFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "b"); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged tracker: err %v, want an error (never a guess that would allow restores)", err)
	}
}
