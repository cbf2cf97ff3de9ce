package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(filepath.Join(t.TempDir(), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func record(ns, name, image string) *Record {
	return &Record{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "uid-1"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
		},
		Secrets: map[string]map[string][]byte{"s": {"password": []byte("hunter2")}},
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s := newStore(t)
	rec := record("default", "web", "nginx:1")
	written, err := s.Save(rec)
	if err != nil || !written {
		t.Fatalf("Save = %v, %v; want written", written, err)
	}
	got, err := s.Load(ID{"default", "web"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pod.Spec.Containers[0].Image != "nginx:1" || string(got.Secrets["s"]["password"]) != "hunter2" {
		t.Errorf("loaded %+v, want what was saved", got)
	}
	if got.SavedAt.IsZero() {
		t.Error("SavedAt not set")
	}
	// Files hold secret data: owner-only modes.
	st, err := os.Stat(s.Path(ID{"default", "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, want 0600", st.Mode().Perm())
	}
	dst, _ := os.Stat(s.Dir())
	if dst.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", dst.Mode().Perm())
	}
}

func TestSaveOnlyWhenChanged(t *testing.T) {
	s := newStore(t)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	if w, err := s.Save(record("default", "web", "nginx:1")); err != nil || !w {
		t.Fatalf("first save: %v %v", w, err)
	}
	before, _ := os.ReadFile(s.Path(ID{"default", "web"}))
	clock = clock.Add(time.Hour)
	if w, err := s.Save(record("default", "web", "nginx:1")); err != nil || w {
		t.Fatalf("unchanged save: written=%v err=%v, want not written", w, err)
	}
	after, _ := os.ReadFile(s.Path(ID{"default", "web"}))
	if !bytes.Equal(before, after) {
		t.Error("unchanged save rewrote the file")
	}
	if w, err := s.Save(record("default", "web", "nginx:2")); err != nil || !w {
		t.Fatalf("changed save: written=%v err=%v, want written", w, err)
	}
	got, _ := s.Load(ID{"default", "web"})
	if got.Pod.Spec.Containers[0].Image != "nginx:2" {
		t.Errorf("image %q after spec change, want nginx:2", got.Pod.Spec.Containers[0].Image)
	}
	if !got.SavedAt.Equal(clock) {
		t.Errorf("SavedAt %v, want %v", got.SavedAt, clock)
	}
}

func TestCorruptionDetectedAndSetAside(t *testing.T) {
	id := ID{"default", "web"}
	corruptions := map[string]func(data []byte) []byte{
		"truncated payload":  func(d []byte) []byte { return d[:len(d)-10] },
		"extended payload":   func(d []byte) []byte { return append(d, ' ') },
		"flipped byte":       func(d []byte) []byte { d[len(d)-5] ^= 0x20; return d },
		"secret changed":     func(d []byte) []byte { return bytes.Replace(d, []byte("aHVudGVyMg=="), []byte("aHVudGVyMw=="), 1) },
		"no header":          func(d []byte) []byte { return d[bytes.IndexByte(d, '\n')+1:] },
		"empty file":         func([]byte) []byte { return nil },
		"other format":       func(d []byte) []byte { return bytes.Replace(d, []byte(Format), []byte("something/v9"), 1) },
		"zeroed (power cut)": func(d []byte) []byte { return make([]byte, len(d)) },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			if _, err := s.Save(record("default", "web", "nginx:1")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Save(record("default", "db", "postgres:16")); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(s.Path(id))
			bad := corrupt(bytes.Clone(data))
			if err := os.WriteFile(s.Path(id), bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Load(id); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load of corrupt record: %v, want ErrCorrupt", err)
			}
			recs, corrupt, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].ID() != (ID{"default", "db"}) {
				t.Errorf("List returned %d records, want only default/db", len(recs))
			}
			if len(corrupt) != 1 || corrupt[0].Path != s.Path(id) || corrupt[0].MovedTo == "" {
				t.Fatalf("corrupt = %+v, want the web record reported and moved", corrupt)
			}
			// Set aside, byte for byte, never deleted; the original name is free.
			moved, err := os.ReadFile(corrupt[0].MovedTo)
			if err != nil || !bytes.Equal(moved, bad) {
				t.Errorf("moved file content differs or missing: %v", err)
			}
			if filepath.Dir(corrupt[0].MovedTo) != filepath.Join(s.Dir(), CorruptDir) {
				t.Errorf("moved to %s, want inside %s", corrupt[0].MovedTo, CorruptDir)
			}
			if _, err := os.Stat(s.Path(id)); !os.IsNotExist(err) {
				t.Errorf("corrupt file still under its name: %v", err)
			}
			// Reported once: a second List is clean.
			if _, corrupt, _ := s.List(); len(corrupt) != 0 {
				t.Errorf("second List reports %d corrupt, want 0", len(corrupt))
			}
		})
	}
}

func TestSaveOverCorruptKeepsEvidence(t *testing.T) {
	s := newStore(t)
	id := ID{"default", "web"}
	if err := os.WriteFile(s.Path(id), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if w, err := s.Save(record("default", "web", "nginx:1")); err != nil || !w {
		t.Fatalf("Save over corrupt: %v %v", w, err)
	}
	if _, err := s.Load(id); err != nil {
		t.Errorf("fresh record unreadable: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), CorruptDir))
	if len(entries) != 1 {
		t.Fatalf("corrupt dir has %d files, want the old garbage kept", len(entries))
	}
}

func TestRecordUnderWrongNameIsCorrupt(t *testing.T) {
	s := newStore(t)
	if _, err := s.Save(record("default", "web", "nginx:1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(s.Path(ID{"default", "web"}), s.Path(ID{"default", "other"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ID{"default", "other"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("record of default/web under default/other: %v, want ErrCorrupt", err)
	}
}

func TestInterruptedWriteLeavesOldRecord(t *testing.T) {
	s := newStore(t)
	if _, err := s.Save(record("default", "web", "nginx:1")); err != nil {
		t.Fatal(err)
	}
	// A crash between create-temp and rename leaves a dot file behind.
	tmp := filepath.Join(s.Dir(), ".default_web.ckpt.123456")
	if err := os.WriteFile(tmp, []byte("half a rec"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, corrupt, err := s.List()
	if err != nil || len(corrupt) != 0 || len(recs) != 1 || recs[0].Pod.Spec.Containers[0].Image != "nginx:1" {
		t.Fatalf("List after interrupted write: %d recs, %d corrupt, %v; want the old record only", len(recs), len(corrupt), err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("temporary file not swept: %v", err)
	}
}

func TestRemoveAndNotFound(t *testing.T) {
	s := newStore(t)
	id := ID{"default", "web"}
	if _, err := s.Load(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Save(record("default", "web", "nginx:1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(id); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(id); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
	if _, err := s.Load(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after Remove: %v, want ErrNotFound", err)
	}
}

func TestInvalidIdentities(t *testing.T) {
	s := newStore(t)
	for _, id := range []ID{{"", "web"}, {"default", ""}, {"a_b", "web"}, {"default", "../x"}, {"..", "x"}} {
		if _, err := s.Load(id); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Load(%v) = %v, want an invalid identity error", id, err)
		}
	}
	if _, err := ParseID("default/web"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"web", "/web", "default/", "a/b/c"} {
		if _, err := ParseID(bad); err == nil || !strings.Contains(err.Error(), "namespace/name") {
			t.Errorf("ParseID(%q) = %v, want error", bad, err)
		}
	}
}

func TestAbsenceMark(t *testing.T) {
	s := newStore(t)
	id := ID{"default", "web"}
	if _, ok := s.AbsentSince(id); ok {
		t.Fatal("mark before any")
	}
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	if err := s.MarkAbsent(id, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkAbsent(id, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.AbsentSince(id); !ok || !got.Equal(t0) {
		t.Errorf("AbsentSince = %v %v, want the first mark %v", got, ok, t0)
	}
	// Marks are not records.
	if recs, bad, err := s.List(); err != nil || len(recs)+len(bad) != 0 {
		t.Errorf("List sees the mark: %d recs, %d corrupt, %v", len(recs), len(bad), err)
	}
	if err := s.ClearAbsent(id); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearAbsent(id); err != nil {
		t.Errorf("second clear: %v", err)
	}
	if _, ok := s.AbsentSince(id); ok {
		t.Error("mark survived ClearAbsent")
	}
	// A damaged mark counts as none (unknown), never as "gone".
	if err := os.WriteFile(filepath.Join(s.Dir(), "default_web"+AbsentSuffix), []byte("yesterday"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.AbsentSince(id); ok {
		t.Error("damaged mark taken as a time")
	}
}

// Corrupt files are kept as evidence for a documented retention, then pruned.
func TestPruneCorruptAfterRetention(t *testing.T) {
	s := newStore(t)
	clock := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	for _, name := range []string{"old", "new"} {
		if _, err := s.Save(record("default", name, "i")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Quarantine(ID{"default", name}); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(6 * 24 * time.Hour)
	}
	stranger := filepath.Join(s.Dir(), CorruptDir, "operator-notes.txt")
	if err := os.WriteFile(stranger, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Now: "old" was set aside 12 days ago, "new" 6 days ago.
	n, err := s.PruneCorrupt(7*24*time.Hour, clock)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, err %v; want 1", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(s.Dir(), CorruptDir, "*"))
	if len(left) != 2 || !strings.Contains(strings.Join(left, " "), "default_new.ckpt.") {
		t.Fatalf("left in corrupt/: %v; want the recent one and the operator's file", left)
	}
}

// Purge removes every file the store wrote and nothing else.
func TestPurgeRemovesOnlyOurs(t *testing.T) {
	s := newStore(t)
	for _, name := range []string{"a", "b"} {
		if _, err := s.Save(record("default", name, "i")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkAbsent(ID{"default", "a"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Quarantine(ID{"default", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), "lease"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := s.Purge("lease")
	if err != nil || len(removed) != 4 {
		t.Fatalf("removed %v, err %v; want a.ckpt, a.absent, corrupt b, lease", removed, err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Fatalf("empty checkpoint dir left behind: %v", err)
	}

	// A directory shared with files that are not ours keeps them.
	s2 := newStore(t)
	if _, err := s2.Save(record("default", "a", "i")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(s2.Dir(), "unrelated.conf")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Purge(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("Purge removed a file that is not checkpointd's: %v", err)
	}
}

func jsonRecord() ([]byte, error) { return json.Marshal(record("default", "web", "nginx")) }

// A record whose file is unchanged since it was last read is not read
// again: a reconcile pass lists every record, and at 110 pods reading and
// decoding them all was a third of checkpointd's CPU (perf record of
// workload 8). A file changed in any way (rewritten by
// a rename, edited in place) is read again; a corrupt one is still set
// aside.
func TestUnchangedRecordNotReadAgain(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rec := &Record{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p-%d", i), UID: "u"}}}
		if _, err := s.Save(rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.List(); err != nil {
		t.Fatal(err)
	}
	before := Reads()
	for range 5 {
		recs, bad, err := s.List()
		if err != nil || len(recs) != 3 || len(bad) != 0 {
			t.Fatalf("List: %d records, %v, %v", len(recs), bad, err)
		}
	}
	if n := Reads() - before; n != 0 {
		t.Fatalf("5 lists of 3 unchanged records read %d files, want 0", n)
	}
	// Rewritten (a new pod UID): read again.
	id := ID{Namespace: "default", Name: "p-1"}
	if _, err := s.Save(&Record{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p-1", UID: "u2"}}}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Load(id); err != nil || rec.Pod.UID != "u2" {
		t.Fatalf("after a rewrite: %+v, %v", rec, err)
	}
	// Damaged in place, same size: read again, and set aside.
	path := s.Path(id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-2] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	recs, bad, err := s.List()
	if err != nil || len(recs) != 2 || len(bad) != 1 {
		t.Fatalf("after damage in place: %d records, %d corrupt, %v; want 2 and the damaged one set aside", len(recs), len(bad), err)
	}
}
