//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// TestK3sConflist: the --flannel-cni-conf file docs/install.md gives k3s
// users (conf/k3s-flannel-stickyip.conflist: k3s's own chain, flannel with
// forceAddress, then portmap and bandwidth, with stickyip as flannel's
// IPAM) run by containerd 2.3 through the real plugins: a pod with
// kubernetes.io/ingress-bandwidth gets its address from stickyip and its
// rate limit from bandwidth (a tbf qdisc on its host-side veth at that
// rate); deleted and created again, it gets the same address back; a pod
// without bandwidth annotations goes through the same chain untouched.
func TestK3sConflist(t *testing.T) {
	n := newNode(t, k3sConf, "stickyip")
	_, cri := n.startContainerd(t)

	web := harness.Pod{Name: "web", Namespace: "default", UID: "web-1",
		Annotations: map[string]string{annDuration: "10", "kubernetes.io/ingress-bandwidth": "8M"}}
	id1, ips1 := runPod(t, cri, web)
	if rows := entriesFor(n.list(t), "default", "web"); len(rows) != 1 || rows[0].IP != ips1[0] || rows[0].Duration != "10m0s" {
		t.Fatalf("stickyip list for default/web: %+v; want %s allocated with a 10m reservation", rows, ips1[0])
	}
	if rates := n.tbfRates(t); !slices.Contains(rates, 8_000_000/8) {
		t.Fatalf("tbf rates on the node's links %v: want one of 1000000 bytes/s (8M) from the bandwidth plugin", rates)
	}
	_, plain := runPod(t, cri, harness.Pod{Name: "plain", Namespace: "default", UID: "plain-1"})
	if slices.Contains(plain, ips1[0]) {
		t.Fatalf("default/plain got web's address %s", ips1[0])
	}

	deletePod(t, cri, id1)
	if rows := entriesFor(n.list(t), "default", "web"); len(rows) != 1 || rows[0].State != "reserved" || rows[0].IP != ips1[0] {
		t.Fatalf("stickyip list for default/web after its deletion: %+v; want %s reserved", rows, ips1[0])
	}
	web.UID = "web-2"
	_, ips2 := runPod(t, cri, web)
	if !slices.Equal(ips2, ips1) {
		t.Fatalf("default/web created again got %v, want %v", ips2, ips1)
	}
	n.check(t)
}

// tbfRates returns the rate (bytes/s) of every tbf qdisc on the node's
// links (`tc -j qdisc show` in the node's namespace).
func (n *node) tbfRates(t *testing.T) []int {
	t.Helper()
	out, err := n.ns.Exec(nil, "tc", "-j", "qdisc", "show")
	if err != nil {
		t.Fatalf("tc qdisc show: %v\n%s", err, out)
	}
	var qdiscs []struct {
		Kind    string `json:"kind"`
		Dev     string `json:"dev"`
		Options struct {
			Rate int `json:"rate"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &qdiscs); err != nil {
		t.Fatalf("tc -j qdisc show: %v\n%s", err, out)
	}
	var rates []int
	var all []string
	for _, q := range qdiscs {
		all = append(all, fmt.Sprintf("%s %s %d", q.Dev, q.Kind, q.Options.Rate))
		if q.Kind == "tbf" {
			rates = append(rates, q.Options.Rate)
		}
	}
	t.Logf("qdiscs: %v", all)
	return rates
}
