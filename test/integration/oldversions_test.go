//go:build integration

package integration

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"

	types020 "github.com/containernetworking/cni/pkg/types/020"

	"github.com/stickyip/stickyip/test/harness"
)

// Conflists with cniVersion 0.1.0 and 0.2.0 work through
// bridge and cnitool as host-local's do: the same result shape, converted by
// the CNI library, and a re-created pod gets its addresses back.
func TestOldCNIVersions(t *testing.T) {
	for _, ver := range []string{"0.1.0", "0.2.0"} {
		t.Run(ver, func(t *testing.T) {
			shapes := map[string][]string{}
			for _, ipamType := range []string{"host-local", "stickyip"} {
				n := newNode(t, bridgeConf, ipamType)
				n.editConf(t, func(list map[string]any) { list["cniVersion"] = ver })
				db := harness.PodArgs{Namespace: "default", Name: "db", UID: "db-1", Annotations: map[string]string{annDuration: "10"}}
				ns := n.podNetns(t, "db")
				res, err := n.tool.Add(t, n.net, ns.Path, db)
				if err != nil {
					t.Fatalf("%s: cnitool add with cniVersion %s: %v", ipamType, ver, err)
				}
				ips := oldResultIPs(t, ver, res.Raw)
				requireAddrs(t, ns, ips)
				shapes[ipamType] = jsonShape(t, res.Raw)
				if ipamType != "stickyip" {
					continue
				}
				n.del(t, ns, db)
				ns.Delete()
				if rows := entriesFor(n.list(t), "default", "db"); !sameSet(ipsIn(rows, "reserved"), ips) {
					t.Fatalf("after DEL: %+v; want %v reserved", rows, ips)
				}
				db.UID = "db-2"
				ns2 := n.podNetns(t, "db")
				res, err = n.tool.Add(t, n.net, ns2.Path, db)
				if err != nil {
					t.Fatalf("re-ADD: %v", err)
				}
				if got := oldResultIPs(t, ver, res.Raw); !slices.Equal(got, ips) {
					t.Fatalf("re-created pod got %v, want %v", got, ips)
				}
			}
			if !slices.Equal(shapes["stickyip"], shapes["host-local"]) {
				t.Fatalf("cniVersion %s result keys differ:\nstickyip   %v\nhost-local %v", ver, shapes["stickyip"], shapes["host-local"])
			}
		})
	}
}

// oldResultIPs parses a 0.1.0/0.2.0 result (one ip4, one ip6) as that version
// and returns its two addresses without prefix length.
func oldResultIPs(t *testing.T, ver, raw string) []string {
	t.Helper()
	var r types020.Result
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	if r.CNIVersion != ver || r.IP4 == nil || r.IP6 == nil || r.IP4.Gateway == nil {
		t.Fatalf("result %s: want a %s result with ip4 (with gateway) and ip6", raw, ver)
	}
	return []string{r.IP4.IP.IP.String(), r.IP6.IP.IP.String()}
}

// jsonShape lists the key paths of a JSON document (values left out).
func jsonShape(t *testing.T, raw string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				out = append(out, prefix+"."+k)
				walk(prefix+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(prefix+"[]", e)
			}
		}
	}
	walk("", v)
	sort.Strings(out)
	return slices.Compact(out)
}
