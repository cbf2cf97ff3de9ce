package entry

import (
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	h := Hold{Node: "node1", Pod: "web-7d9f8-x2x4q", IPs: []string{"10.244.1.5", "fd00::5"}, Since: t0.Add(1234 * time.Millisecond)}
	got, err := Parse(h.String())
	if err != nil || !got.Equal(h) {
		t.Fatalf("Parse(%q) = %+v, %v; want %+v", h.String(), got, err, h)
	}
	for _, bad := range []string{"", "node1", "node1 pod", "node1 pod 2026-11-25T00:00:00Z", "node1 pod yesterday 10.0.0.1",
		"node1  2026-11-25T00:00:00Z 10.0.0.1", "node1 pod 2026-11-25T00:00:00Z 10.0.0.1 extra"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// FuzzParse: any entry is refused or read back the same once written.
func FuzzParse(f *testing.F) {
	f.Add("node1 db-0 2026-11-25T00:00:00.000Z 10.244.1.5")
	f.Add("n p 2026-11-25T00:00:00Z a,b")
	f.Fuzz(func(t *testing.T, v string) {
		h, err := Parse(v)
		if err != nil {
			return
		}
		again, err := Parse(h.String())
		if err != nil || !again.Equal(h) {
			t.Fatalf("%q read as %+v, written as %q, read back as %+v (%v)", v, h, h.String(), again, err)
		}
	})
}
