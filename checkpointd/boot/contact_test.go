package boot

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestClockSurvivesARestartAndLagsAtMostWriteEvery(t *testing.T) {
	dir := t.TempDir()
	c, err := OpenClock(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, known := c.Since(t0); known {
		t.Fatal("a clock never written knows the last contact")
	}
	for i := 0; i <= 25; i++ { // a contact every second for 25 s
		if err := c.Contact(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// In memory: exact.
	if d, known := c.Since(t0.Add(time.Minute)); !known || d != 35*time.Second {
		t.Errorf("Since = %s %t, want 35s", d, known)
	}
	// After a restart: what the disk holds, at most ContactWriteEvery behind, never ahead.
	c2, err := OpenClock(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, known := c2.Since(t0.Add(time.Minute))
	if !known || d < 35*time.Second || d > 35*time.Second+ContactWriteEvery {
		t.Errorf("after a restart Since = %s %t, want within [35s, 35s+%s]", d, known, ContactWriteEvery)
	}
	// The clock set back below the last contact: unknown (the safe side).
	if _, known := c2.Since(t0); known {
		t.Error("a clock set back before the last contact still claims to know it")
	}
}

func TestDamagedFileIsUnknown(t *testing.T) {
	for _, content := range []string{"", "yesterday\n", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05+01:00\n", "0001-01-01T00:00:00Z\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ContactFileName), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := OpenClock(dir)
		if err == nil {
			t.Errorf("%q: no error", content)
		}
		if _, known := c.Since(time.Now()); known {
			t.Errorf("%q: a damaged file gives a known last contact", content)
		}
	}
}

func FuzzParseContact(f *testing.F) {
	f.Add([]byte("2026-01-02T03:04:05.123456789Z\n"))
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		at, err := ParseContact(data)
		if err != nil {
			return
		}
		again, err := ParseContact(formatContact(at))
		if err != nil || !again.Equal(at) {
			t.Fatalf("%q parsed as %s, which does not read back (%v)", data, at, err)
		}
	})
}
