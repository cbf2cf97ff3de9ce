//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// Scenario 8: switching a live node from host-local. Allocations upstream
// host-local made in its data dir are not handed out again by stickyip.
func TestSwitchFromHostLocal(t *testing.T) {
	n := newNode(t, flannelConf, "host-local")
	a := harness.PodArgs{Namespace: "default", Name: "old-a", UID: "a-1"}
	b := harness.PodArgs{Namespace: "default", Name: "old-b", UID: "b-1"}
	aNS, bNS := n.podNetns(t, "olda"), n.podNetns(t, "oldb")
	aIP := n.add(t, aNS, a)[0]
	bIP := n.add(t, bNS, b)[0]

	// The operator installs stickyip and changes the config; old-a and
	// old-b keep running.
	n.writeConf(t, flannelConf, "stickyip")
	var newIPs []string
	for _, name := range []string{"new-c", "new-d", "new-e"} {
		p := harness.PodArgs{Namespace: "default", Name: name, UID: name}
		ips := n.add(t, n.podNetns(t, "new"), p)
		if slices.Contains(ips, aIP) || slices.Contains(ips, bIP) {
			t.Fatalf("stickyip gave %s %v, already used by host-local's pods (%s, %s)", name, ips, aIP, bIP)
		}
		newIPs = append(newIPs, ips...)
	}
	requireAddrs(t, aNS, []string{aIP})

	rows := n.list(t)
	for _, want := range []struct{ ip, netns string }{{aIP, aNS.Path}, {bIP, bNS.Path}} {
		i := slices.IndexFunc(rows, func(e entry) bool { return e.IP == want.ip })
		if i < 0 || rows[i].State != "allocated" || rows[i].ContainerID != harness.CNIToolContainerID(want.netns) {
			t.Fatalf("stickyip list after the switch: %+v; want %s imported as allocated to %s", rows, want.ip, harness.CNIToolContainerID(want.netns))
		}
	}

	// Asking for a host-local pod's IP explicitly is refused.
	thief := harness.PodArgs{Namespace: "default", Name: "thief", UID: "t-1", Extra: []string{"IP=" + aIP}}
	thiefNS := n.podNetns(t, "thief")
	if _, err := n.tool.Add(t, n.net, thiefNS.Path, thief); err == nil || !strings.Contains(err.Error(), aIP) {
		t.Fatalf("ADD asking for host-local's %s: err %v; want a refusal", aIP, err)
	}
	n.tool.Del(n.net, thiefNS.Path, thief)
	n.check(t)
}

// Scenario 8, the old pods' end: flannel replays the ADD-time delegate
// config on DEL, so an old pod's DEL after the switch goes to host-local, not
// stickyip; its imported allocation is released by the next CNI GC that does
// not list it among the valid attachments.
func TestSwitchFromHostLocalOldPodDeleted(t *testing.T) {
	n := newNode(t, flannelConf, "host-local")
	a := harness.PodArgs{Namespace: "default", Name: "old-a", UID: "a-1"}
	aNS := n.podNetns(t, "olda")
	aIP := n.add(t, aNS, a)[0]
	if _, err := os.Stat(filepath.Join(n.hostLocalDir, n.net, aIP)); err != nil {
		t.Fatalf("host-local did not record %s: %v", aIP, err)
	}

	n.writeConf(t, flannelConf, "stickyip")
	newNS := n.podNetns(t, "new")
	n.add(t, newNS, harness.PodArgs{Namespace: "default", Name: "new", UID: "n-1"}) // triggers the import

	n.del(t, aNS, a)
	aNS.Delete()
	if _, err := os.Stat(filepath.Join(n.hostLocalDir, n.net, aIP)); !os.IsNotExist(err) {
		t.Fatalf("flannel did not replay old-a's DEL to host-local: %s still recorded (%v)", aIP, err)
	}
	if i := slices.IndexFunc(n.list(t), func(e entry) bool { return e.IP == aIP }); i >= 0 {
		t.Logf("after old-a's DEL went to host-local, stickyip still holds %s: %+v", aIP, n.list(t)[i])
	}

	conf := n.pluginConf(t, 0)
	ipam := conf["ipam"].(map[string]any)
	ipam["ranges"] = [][]map[string]string{{{"subnet": "10.244.1.0/24"}}} // what flannel fills in
	delegate := map[string]any{"cniVersion": "1.1.0", "name": n.net, "type": "bridge", "ipam": ipam,
		"cni.dev/valid-attachments": []map[string]string{{"containerID": harness.CNIToolContainerID(newNS.Path), "ifname": "eth0"}}}
	stdin, err := json.Marshal(delegate)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runPlugin(t, n, "GC", stdin); err != nil {
		t.Fatalf("stickyip GC: %v\n%s", err, out)
	}
	// Freed: cooling for reservation.reuseDelay (held by no pod, skipped
	// while others are free). Its last holder came from host-local without
	// a pod identity, so nobody may ask for it before the delay ends.
	if i := slices.IndexFunc(n.list(t), func(e entry) bool { return e.IP == aIP }); i < 0 || n.list(t)[i].State != "cooling" {
		t.Fatalf("after a CNI GC without old-a among the valid attachments: %+v; want %s cooling", n.list(t), aIP)
	}
	late := harness.PodArgs{Namespace: "default", Name: "late", UID: "l-1", Extra: []string{"IP=" + aIP}}
	lateNS := n.podNetns(t, "late")
	if _, err := n.tool.Add(t, n.net, lateNS.Path, late); err == nil || !strings.Contains(err.Error(), "cooling down until") {
		t.Fatalf("ADD asking for old-a's freed IP %s during its reuse delay: %v; want a refusal naming the delay", aIP, err)
	}
	n.tool.Del(n.net, lateNS.Path, late)
	n.check(t)
}
