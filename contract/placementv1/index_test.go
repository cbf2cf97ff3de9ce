package placementv1

import (
	"fmt"
	"testing"
)

// Every shard name parses back to its series and number; no other name
// does, so the controller never takes another ConfigMap for a shard.
func TestShardNames(t *testing.T) {
	for _, series := range []string{Names, Keyed} {
		for _, n := range []int{0, 1, 10, maxShard - 1} {
			s, got, ok := ParseShardName(ShardName(series, n))
			if !ok || s != series || got != n {
				t.Errorf("ParseShardName(%q) = %q, %d, %v", ShardName(series, n), s, got, ok)
			}
		}
	}
	for _, name := range []string{"", "stickyip-placement-", "stickyip-placement-names", "stickyip-placement-names-",
		"stickyip-placement-names-01", "stickyip-placement-names-1a", "stickyip-placement-names--1",
		"stickyip-placement-other-0", "stickyip-index-0", "index-0", "stickyip-placement-keyed-+1",
		fmt.Sprintf("stickyip-placement-keyed-%d", maxShard), "stickyip-placement-names-99999999999999999999"} {
		if s, n, ok := ParseShardName(name); ok {
			t.Errorf("ParseShardName(%q) = %q, %d: a name no shard has", name, s, n)
		}
	}
}

// A pod named db and a pod whose stickyip.io/identity is db are two
// identities: they land in two series, and each comes back as it went in.
func TestShardKeys(t *testing.T) {
	for _, c := range []struct{ identity, series, key string }{
		{"db", Names, "db"}, {"identity:db", Keyed, "db"}, {"identity:identity", Keyed, "identity"},
	} {
		s, k := ShardKey(c.identity)
		if s != c.series || k != c.key {
			t.Errorf("ShardKey(%q) = %q, %q; want %q, %q", c.identity, s, k, c.series, c.key)
		}
		if back := ShardIdentity(s, k); back != c.identity {
			t.Errorf("ShardIdentity(%q, %q) = %q; want %q", s, k, back, c.identity)
		}
		index := map[string]string{}
		MergeShard(index, s, map[string]string{k: "n1"})
		if len(index) != 1 || index[c.identity] != "n1" {
			t.Errorf("MergeShard of %s's key %q: %v; want %s → n1", s, k, index, c.identity)
		}
	}
}
