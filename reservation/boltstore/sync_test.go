package boltstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// syncs records what fsync is asked to sync, each with what the data
// directory then holds, and fails the sync of a file named fail.
func syncs(t *testing.T, dir, fail string) *[]string {
	t.Helper()
	var seen []string
	was := fsync
	fsync = func(f *os.File) error {
		var in []string
		for _, name := range []string{DBFile, MarkFile} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				in = append(in, name)
			}
		}
		seen = append(seen, filepath.Base(f.Name())+" ["+strings.Join(in, " ")+"]")
		if filepath.Base(f.Name()) == fail {
			return errors.New("injected sync failure")
		}
		return f.Sync()
	}
	t.Cleanup(func() { fsync = was })
	return &seen
}

// TestFirstWriteSyncs: a power cut after the first write returns keeps the
// database and its creation mark: each is renamed into place and the
// directory synced after it, the mark's content synced before.
func TestFirstWriteSyncs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	seen := syncs(t, dir, "")
	put(t, New(dir, time.Second), "10.0.0.2")
	want := []string{
		"data [" + DBFile + "]",                  // the database renamed into place
		MarkFile + ".new [" + DBFile + "]",       // the mark's content
		"data [" + DBFile + " " + MarkFile + "]", // the mark renamed into place
	}
	if strings.Join(*seen, ", ") != strings.Join(want, ", ") {
		t.Fatalf("syncs: %q, want %q", *seen, want)
	}
}

// TestFailedSyncFailsTheWrite: a creation mark that cannot be synced fails
// the write that makes it, naming the mark, and leaves no mark or
// temporary file behind; so does a data directory that cannot be synced.
func TestFailedSyncFailsTheWrite(t *testing.T) {
	for _, fail := range []string{MarkFile + ".new", "data"} {
		dir := filepath.Join(t.TempDir(), "data")
		syncs(t, dir, fail)
		err := New(dir, time.Second).Update("n", func(reservation.Txn) error { return nil })
		if !errors.Is(err, reservation.ErrIO) || !strings.Contains(err.Error(), "injected sync failure") {
			t.Errorf("sync of %s failing: %v, want ErrIO with the failure", fail, err)
		}
		for _, name := range []string{MarkFile, MarkFile + ".new"} {
			if _, err := os.Stat(filepath.Join(dir, name)); fail != "data" && !os.IsNotExist(err) {
				t.Errorf("sync of %s failing: %s left behind", fail, name)
			}
		}
	}
}

// TestWaitFileSyncs: the wait a new store is held back by outlasts a power
// cut: its content synced, then renamed into place and the directory
// synced.
func TestWaitFileSyncs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	seen := syncs(t, dir, "")
	err := New(dir, time.Second).WithNewStoreWait(time.Hour).Update("n", func(reservation.Txn) error { return nil })
	if !errors.Is(err, reservation.ErrAwaiting) {
		t.Fatalf("first write of a store held back: %v, want ErrAwaiting", err)
	}
	if want := []string{WaitFile + ".new []", "data []"}; strings.Join(*seen, ", ") != strings.Join(want, ", ") {
		t.Fatalf("syncs: %q, want %q", *seen, want)
	}
	if _, err := os.Stat(filepath.Join(dir, WaitFile)); err != nil {
		t.Fatalf("no wait file: %v", err)
	}
}
