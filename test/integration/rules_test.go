//go:build integration

package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
	"github.com/stickyip/stickyip/test/harness"
)

// ipamCall runs bin/stickyip as bridge calls it (the node's delegate config,
// with a's annotations) for ADD of a fresh container, and returns its CNI
// error: the code the runtime gets, which cnitool does not print.
func (n *node) ipamCall(t *testing.T, a harness.PodArgs) *harness.CNIError {
	t.Helper()
	conf := n.pluginConf(t, 0)
	if len(a.Annotations) > 0 {
		conf["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": a.Annotations}
	}
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"IgnoreUnknown=1", "K8S_POD_NAMESPACE=" + a.Namespace, "K8S_POD_NAME=" + a.Name, "K8S_POD_UID=" + a.UID}
	o := n.plugin(t).CNI(harness.CNICall{Command: "ADD", ContainerID: "direct-" + a.UID, Netns: "/proc/self/ns/net", IfName: "eth0",
		Args: strings.Join(append(args, a.Extra...), ";"), Stdin: stdin})
	if o.Err == nil {
		t.Fatalf("stickyip ADD for %s/%s succeeded: %s", a.Namespace, a.Name, o.Describe())
	}
	return o.Err
}

// A pod may not take the node's gateway (the bridge
// address every pod routes through), the network or the broadcast address —
// neither by the stickyip.io/ips annotation nor by IP= in CNI_ARGS, in
// either family. cnitool through bridge gets the reason; the plugin's code
// is 7 (invalid), not 101 (held by someone else).
func TestRequestedGatewayRefused(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	// An ordinary pod first gets addresses, never the gateways. (It also
	// keeps a port on the bridge: bridge v1.9.1 attaches the veth before
	// calling IPAM, and a bridge whose last port went away is left with a
	// zero MAC that its next ADD cannot set — "could not set bridge's mac".)
	okNS := n.podNetns(t, "ok")
	okIPs := n.add(t, okNS, harness.PodArgs{Namespace: "tenant", Name: "ok", UID: "ok-1"})
	if len(okIPs) != 2 || slices.Contains(okIPs, "10.88.0.1") || slices.Contains(okIPs, "fd88::1") {
		t.Fatalf("ordinary pod got %v", okIPs)
	}
	requireAddrs(t, okNS, okIPs)
	for _, tc := range []struct {
		name, why string
		args      harness.PodArgs
	}{
		{"annotation, IPv4 gateway", "10.88.0.1 is the gateway of subnet 10.88.0.0/16",
			harness.PodArgs{Annotations: map[string]string{annIPs: "10.88.0.1"}}},
		{"annotation, IPv6 gateway", "fd88::1 is the gateway of subnet fd88::/64",
			harness.PodArgs{Annotations: map[string]string{annIPs: "fd88::1"}}},
		{"IP=, IPv4 gateway", "10.88.0.1 is the gateway", harness.PodArgs{Extra: []string{"IP=10.88.0.1"}}},
		{"IP=, broadcast", "10.88.255.255 is the broadcast address of subnet 10.88.0.0/16", harness.PodArgs{Extra: []string{"IP=10.88.255.255"}}},
		{"IP=, network address", "10.88.0.0 is the network address", harness.PodArgs{Extra: []string{"IP=10.88.0.0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.args
			a.Namespace, a.Name, a.UID = "tenant", "gw", "gw-"+strings.NewReplacer(" ", "", ",", "", "=", "").Replace(tc.name)
			ns := n.podNetns(t, "gw")
			_, err := n.tool.Add(t, n.net, ns.Path, a)
			if err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("cnitool add asking for %s: %v; want a refusal saying %q", tc.name, err, tc.why)
			}
			n.tool.Del(n.net, ns.Path, a) // the runtime's cleanup after a failed ADD
			if e := n.ipamCall(t, a); e.Code != 7 || !strings.Contains(e.Msg, tc.why) {
				t.Fatalf("stickyip ADD: %s; want code 7 saying %q", e, tc.why)
			}
		})
	}
	var held []string
	for _, e := range n.list(t) {
		held = append(held, e.IP)
	}
	if !sameSet(held, okIPs) {
		t.Fatalf("after the refused ADDs stickyip records %v; want only tenant/ok's %v", held, okIPs)
	}
	n.check(t)
}

// A store of an earlier stickyip, which granted a requested gateway, holds an
// allocation on it: `stickyip check` reports it, and the pod's DEL through
// the chain drops the record instead of reserving it.
func TestEarlierGatewayAllocationReportedAndDropped(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	ns := n.podNetns(t, "old")
	pod := harness.PodArgs{Namespace: "tenant", Name: "old", UID: "old-1"}
	err := boltstore.New(n.dataDir, 0).Update(n.net, func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.88.0.1"), State: reservation.Allocated,
			ContainerID: harness.CNIToolContainerID(ns.Path), IfName: "eth0", Netns: ns.Path,
			Identity: reservation.Identity{Namespace: "tenant", Name: "old", IfName: "eth0"}, Duration: time.Hour,
			AllocatedAt: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	o := n.plugin(t).Tool("--data-dir", n.dataDir, "check", "--cni-conf-dir", n.confDir)
	if o.ExitCode != 1 || !strings.Contains(string(o.Stdout), "10.88.0.1 is the gateway of subnet 10.88.0.0/16 but in use by container") ||
		!strings.Contains(string(o.Stdout), "delete that pod") {
		t.Fatalf("stickyip check on a store with an allocation on the gateway: %s; want exit 1 naming it", o.Describe())
	}
	n.del(t, ns, pod)
	if rows := n.list(t); len(rows) != 0 {
		t.Fatalf("after the DEL of the pod holding the gateway (1h reservation recorded): %+v; want no record", rows)
	}
	if log, _ := os.ReadFile(n.logFile); !strings.Contains(string(log), "dropping an allocation of an address never given to a pod") {
		t.Fatalf("the log does not say the gateway record was dropped:\n%s", log)
	}
	if o := n.plugin(t).Tool("--data-dir", n.dataDir, "check", "--cni-conf-dir", n.confDir); o.ExitCode != 0 {
		t.Fatalf("stickyip check after the DEL: %s", o.Describe())
	}
}

// On a five-address range with the default poolFull
// (evict) and maxPerNamespace 3: a namespace that parks pods with week-long
// reservations cannot park more than three, gets its own addresses back
// before anyone else's, and when another namespace's pod needs one, the
// namespace holding the most gives way — never prod/db-0, although its
// reservation is the closest to expiry.
func TestCrossNamespaceEviction(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	n.setIPAM(t, map[string]any{
		"ranges":      [][]map[string]string{{{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.14"}}},
		"reservation": map[string]any{"reuseDelay": "0s", "maxDuration": "168h", "maxPerNamespace": 3},
	})
	type pod struct {
		args harness.PodArgs
		ns   *harness.Netns
	}
	start := func(namespace, name, keep string) *pod {
		t.Helper()
		p := &pod{args: harness.PodArgs{Namespace: namespace, Name: name, UID: name + "-uid"}, ns: n.podNetns(t, name)}
		if keep != "" {
			p.args.Annotations = map[string]string{annDuration: keep}
		}
		n.add(t, p.ns, p.args)
		return p
	}
	stop := func(p *pod) {
		t.Helper()
		n.del(t, p.ns, p.args)
		p.ns.Delete()
	}
	reservedIP := func(namespace, name string) string {
		t.Helper()
		rows := entriesFor(n.list(t), namespace, name)
		if ips := ipsIn(rows, "reserved"); len(ips) == 1 {
			return ips[0]
		}
		return ""
	}

	db := start("prod", "db-0", "1h")
	var parked []*pod
	for _, name := range []string{"park-0", "park-1", "park-2", "park-3"} {
		parked = append(parked, start("tenant", name, "168h"))
	}
	stop(db)
	for _, p := range parked {
		stop(p)
	}
	dbIP := reservedIP("prod", "db-0")
	if dbIP == "" {
		t.Fatalf("prod/db-0 not reserved after its DEL: %+v", n.list(t))
	}
	// maxPerNamespace 3: the fourth parked pod's DEL freed its address.
	if rows := entriesFor(n.list(t), "tenant", "park-3"); len(rows) != 0 {
		t.Fatalf("tenant/park-3 deleted while tenant holds 3 reservations (maxPerNamespace 3): %+v; want freed", rows)
	}
	if log, _ := os.ReadFile(n.logFile); !strings.Contains(string(log), "ipam.reservation.maxPerNamespace") {
		t.Fatalf("the log does not say why tenant/park-3 was not reserved:\n%s", log)
	}
	park0 := reservedIP("tenant", "park-0")

	start("tenant", "next-0", "") // takes park-3's freed address
	got := n.add(t, n.podNetns(t, "next-1"), harness.PodArgs{Namespace: "tenant", Name: "next-1", UID: "next-1-uid"})
	if got[0] != park0 {
		t.Fatalf("tenant/next-1 on a full pool got %v; want tenant's own park-0 reservation %s (its closest to expiry), not prod/db-0's %s", got, park0, dbIP)
	}
	park1 := reservedIP("tenant", "park-1")
	got = n.add(t, n.podNetns(t, "web"), harness.PodArgs{Namespace: "shop", Name: "web", UID: "web-uid"})
	if got[0] != park1 {
		t.Fatalf("shop/web on a full pool got %v; want %s of tenant, the namespace holding the most reservations (2 against prod's 1)", got, park1)
	}
	if ip := reservedIP("prod", "db-0"); ip != dbIP {
		t.Fatalf("prod/db-0's reservation %s is gone (now %q): %+v", dbIP, ip, n.list(t))
	}
	if log, _ := os.ReadFile(n.logFile); !strings.Contains(string(log), "the requesting pod's own namespace gives way first") ||
		!strings.Contains(string(log), "namespace tenant holds the most") {
		t.Fatalf("the log does not explain the evictions:\n%s", log)
	}
	n.check(t)
}

// An address cooling after default/a's deletion is
// refused to a pod of another namespace that asks for it (error 101 naming
// the end of the delay) until the delay has passed; default/a itself may
// have it back at once. The delay is an hour, so that the refusals are
// judged inside it whatever the host's speed; its end comes by moving the
// record's time back.
func TestCoolingAddressRequestedByStranger(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	const delay = time.Hour
	n.setIPAM(t, map[string]any{
		"ranges":      [][]map[string]string{{{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.13"}}},
		"reservation": map[string]string{"reuseDelay": delay.String()},
	})
	a := harness.PodArgs{Namespace: "default", Name: "a", UID: "a-1"}
	aNS := n.podNetns(t, "a")
	ip := n.add(t, aNS, a)[0]
	n.del(t, aNS, a)
	aNS.Delete()

	stranger := harness.PodArgs{Namespace: "tenant", Name: "s", UID: "s-1", Annotations: map[string]string{annIPs: ip}}
	sNS := n.podNetns(t, "s")
	_, err := n.tool.Add(t, n.net, sNS.Path, stranger)
	if err == nil || !strings.Contains(err.Error(), "cooling down until") || !strings.Contains(err.Error(), "only default/a") {
		t.Fatalf("tenant/s asking for %s, cooling after default/a: %v; want a refusal naming the delay and default/a", ip, err)
	}
	n.tool.Del(n.net, sNS.Path, stranger)
	if e := n.ipamCall(t, harness.PodArgs{Namespace: "tenant", Name: "s2", UID: "s-2", Extra: []string{"IP=" + ip}}); e.Code != 101 {
		t.Fatalf("stickyip ADD of tenant/s2 with IP=%s while cooling: %s; want code 101", ip, e)
	}

	a.UID = "a-2"
	a.Extra = []string{"IP=" + ip}
	a2NS := n.podNetns(t, "a2")
	if got := n.add(t, a2NS, a); !slices.Equal(got, []string{ip}) {
		t.Fatalf("default/a asking for its own cooling %s got %v", ip, got)
	}
	n.del(t, a2NS, a)
	a2NS.Delete()

	n.expire(t, ip)
	stranger.UID = "s-3"
	if got := n.add(t, n.podNetns(t, "s3"), stranger); !slices.Equal(got, []string{ip}) {
		t.Fatalf("after the delay tenant/s asking for %s got %v", ip, got)
	}
	n.check(t)
}
