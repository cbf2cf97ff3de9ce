//go:build integration

package integration

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/test/harness"
)

// checkpointd's leak release, on the real store and a
// real network namespace. A cnitool sandbox is unknown to any CRI; while its
// namespace exists its allocation is kept, however often checkpointd asks;
// once the namespace is deleted (no DEL ever came) it is released and cools
// by the network's reuse delay, as after a DEL.
func TestLeakReleaseNeedsNetnsGone(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	pod := harness.PodArgs{Namespace: "default", Name: "nerd", UID: "n-1"}
	ns := n.podNetns(t, "nerd")
	ips := n.add(t, ns, pod)
	cid := harness.CNIToolContainerID(ns.Path)
	store := ipamstore.New(n.dataDir, 5*time.Second, slog.New(slog.DiscardHandler)).WithCNIConfDir(n.confDir)

	for range 3 {
		released, err := store.ReleaseContainer(n.net, cid, "eth0")
		if err != nil || released {
			t.Fatalf("leak release of a sandbox whose netns %s exists: released %v, %v; want kept", ns.Path, released, err)
		}
	}
	if rows := entriesFor(n.list(t), "default", "nerd"); !sameSet(ipsIn(rows, "allocated"), ips) {
		t.Fatalf("after leak passes with the netns alive: %+v; want %v still allocated", rows, ips)
	}
	requireAddrs(t, ns, ips)

	if err := ns.Delete(); err != nil {
		t.Fatal(err)
	}
	released, err := store.ReleaseContainer(n.net, cid, "eth0")
	if err != nil || !released {
		t.Fatalf("leak release after the netns was deleted: released %v, %v; want released", released, err)
	}
	var cooling []string
	for _, e := range n.list(t) {
		if e.State == "cooling" {
			cooling = append(cooling, e.IP)
		}
	}
	if !sameSet(cooling, ips) {
		t.Fatalf("after the leak release: cooling %v, want %v (the conflist's default reuseDelay)", cooling, ips)
	}
}
