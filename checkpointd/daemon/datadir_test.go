package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A directory removed while a process still reaches it (as a container
// reaches a hostPath directory removed on the host: here through an open
// descriptor of it) is told from a live one and from a missing one; the
// watch then returns an error naming it, and nothing while it lives.
func TestDataDirRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if dataDirRemoved(seen) || dataDirRemoved(dir) {
		t.Fatal("a live directory counted as removed")
	}
	if err := watchDataDir(ctx, seen, 10*time.Millisecond); err != nil {
		t.Fatalf("watch of a live directory: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if dataDirRemoved(dir) {
		t.Fatal("a missing directory counted as removed (the next write makes it anew)")
	}
	if !dataDirRemoved(seen) {
		t.Fatal("the removed directory, still reached, not counted as removed")
	}
	err = watchDataDir(context.Background(), seen, 10*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), seen) {
		t.Fatalf("watch of a removed directory: %v, want an error naming it", err)
	}
}
