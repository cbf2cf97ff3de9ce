package entry

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestListed(t *testing.T) {
	l := Listed{"web": {7}, "db": {5, 0, 5}, "empty": nil, "junk": {8, -1}}
	v, ok := l.Format(1000)
	if !ok || v != "db/05 web/7" {
		t.Fatalf("Format = %q, %t", v, ok)
	}
	got, bad := ParseListed(v)
	if len(bad) > 0 || !maps.EqualFunc(got, Listed{"db": {0, 5}, "web": {7}}, slices.Equal) {
		t.Fatalf("ParseListed(%q) = %v, %v", v, got, bad)
	}
	got, bad = ParseListed("  db/5 DB/1 db-/1 /3 db/8 db/ db web/77 x/1/2 \n apps/1a ")
	if !maps.EqualFunc(got, Listed{"db": {5}, "web": {7}}, slices.Equal) || len(bad) != 8 {
		t.Fatalf("ParseListed with bad tokens = %v, %d bad: %v", got, len(bad), bad)
	}
	if v, ok := (Listed{"aaaa": {1}, "bbbb": {2}}).Format(len("aaaa/1")); v != "aaaa/1" || ok {
		t.Fatalf("Format beyond its limit = %q, %t", v, ok)
	}
}

// FuzzParseListed: any value is read without panic into namespaces and
// shard numbers that are valid, and what is read, written again, reads
// back the same with nothing refused.
func FuzzParseListed(f *testing.F) {
	for _, s := range []string{"db/05 web/7", "", "a/01234567", "db/8", "x/1/2 y/", strings.Repeat("n/0 ", 50), "ns/\x00", "é/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l, _ := ParseListed(v)
		for ns, nums := range l {
			if len(nums) == 0 || slices.ContainsFunc(nums, func(n int) bool { return n < 0 || n >= Shards }) || !slices.IsSorted(nums) {
				t.Fatalf("ParseListed(%q): %s → %v", v, ns, nums)
			}
		}
		w, ok := l.Format(1 << 20)
		if !ok {
			t.Fatalf("Format of %v left some out", l)
		}
		again, bad := ParseListed(w)
		if len(bad) > 0 || !maps.EqualFunc(again, l, slices.Equal) {
			t.Fatalf("ParseListed(%q) = %v; written %q, read back %v, %v", v, l, w, again, bad)
		}
	})
}
