package entry

import (
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	for _, l := range []Line{
		{Identity: "db-0", Pod: "db-0", Seq: 0, Since: t0.Add(1234 * time.Millisecond), IPs: []string{"10.244.1.5", "fd00::5"}},
		{Identity: "identity:cache", Pod: "cache-7d9f8-x2x4q", Seq: 999999999999999999, Since: t0, Until: t0.Add(time.Hour), IPs: []string{"10.244.1.6"}},
	} {
		got, err := Parse(l.String())
		if err != nil || !got.Equal(l) {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", l.String(), got, err, l)
		}
	}
	for _, bad := range []string{
		"", "db-0", "db-0 db-0 1 2026-11-25T00:00:00.000Z - 10.0.0.1 extra",
		"db-0 own-b 1 2026-11-25T00:00:00.000Z - 10.0.0.1",        // a pod-name identity names another pod
		"DB-0 DB-0 1 2026-11-25T00:00:00.000Z - 10.0.0.1",         // not a pod name
		"identity: x 1 2026-11-25T00:00:00.000Z - 10.0.0.1",       // empty key
		"db-0 db-0 01 2026-11-25T00:00:00.000Z - 10.0.0.1",        // not a resourceVersion
		"db-0 db-0 -1 2026-11-25T00:00:00.000Z - 10.0.0.1",        //
		"db-0 db-0 1 2026-11-25T00:00:00Z - 10.0.0.1",             // not to the millisecond
		"db-0 db-0 1 2026-11-25T00:00:00.000+01:00 - 10.0.0.1",    // not UTC
		"db-0 db-0 1 2026-11-25T00:00:00.000Z later 10.0.0.1",     //
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - 10.0.0.500",       //
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - fe80::1%eth0",     // zone
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - ::ffff:10.0.0.1x", //
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - " + strings.Repeat("10.0.0.1,", 8) + "10.0.0.2",
		"db-0 db-0 1000000000000000000 2026-11-25T00:00:00.000Z - 10.0.0.1", // 19 digits: beyond the policies' ints
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - ::ffff:10.0.0.1",            // IPv4-mapped IPv6 (CEL isIP refuses it)
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - 2001:DB8::1",                // not canonical
		"db-0 db-0 1 2026-11-25T00:00:00.000Z - 2001:db8:0:0:0:0:0:1",       // not canonical
		"db..0 db..0 1 2026-11-25T00:00:00.000Z - 10.0.0.1",                 // not an RFC 1123 subdomain
		"db.-0 db.-0 1 2026-11-25T00:00:00.000Z - 10.0.0.1",                 //
		"identity:-x pod 1 2026-11-25T00:00:00.000Z - 10.0.0.1",             //
	} {
		if l, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted: %+v", bad, l)
		}
	}
}

// A bad line is skipped, not the value: the others are still read.
func TestParseValueSkipsBadLines(t *testing.T) {
	lines, bad := ParseValue("db-0 db-0 5 2026-11-25T00:00:00.000Z - 10.0.0.1\ngarbage\n\ndb-1 db-1 7 2026-11-25T00:00:00.000Z 2026-11-25T01:00:00.000Z 10.0.0.2\n")
	if len(lines) != 2 || len(bad) != 1 || lines[0].Identity != "db-0" || lines[1].Until.IsZero() {
		t.Fatalf("lines %+v, bad %v", lines, bad)
	}
	if v := FormatValue([]Line{lines[1], lines[0]}); v != "db-0 db-0 5 2026-11-25T00:00:00.000Z - 10.0.0.1\ndb-1 db-1 7 2026-11-25T00:00:00.000Z 2026-11-25T01:00:00.000Z 10.0.0.2" {
		t.Fatalf("FormatValue = %q", v)
	}
}

// FuzzParse: any entry is refused or read back the same once written, and
// what is accepted is what the index policy accepts (the fields' forms).
func FuzzParse(f *testing.F) {
	f.Add("db-0 db-0 42 2026-11-25T00:00:00.000Z - 10.244.1.5")
	f.Add("identity:cache cache-x 0 2026-11-25T00:00:00.000Z 2026-11-25T00:10:00.000Z 10.244.1.5,fd00::1")
	f.Fuzz(func(t *testing.T, v string) {
		l, err := Parse(v)
		if err != nil {
			return
		}
		s := l.String()
		if strings.ContainsAny(s, "\n\t") || len(strings.Split(s, " ")) != 6 {
			t.Fatalf("%q written as %q", v, s)
		}
		again, err := Parse(s)
		if err != nil || !again.Equal(l) {
			t.Fatalf("%q read as %+v, written as %q, read back as %+v (%v)", v, l, s, again, err)
		}
	})
}
