package ipam

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

func (w *world) setNodeRanges(cidrs ...string) (NodeRanges, []*reservation.Record) {
	w.t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	var n NodeRanges
	var dropped []*reservation.Record
	err := w.store.Update("net1", func(tx reservation.Txn) (err error) {
		n, dropped, err = w.eng.SetNodeRanges(tx, ps)
		return err
	})
	if err != nil {
		w.t.Fatalf("SetNodeRanges(%v): %v", cidrs, err)
	}
	return n, dropped
}

// A node registered again with another podCIDR: until the network's range
// follows (flanneld's new lease), no address of the old range is handed out,
// kept for a pod, or reserved; what the old range held is dropped and said
// so; once the range is the new one, pods get addresses again.
func TestNodeRangesRetired(t *testing.T) {
	old := newWorld(t, `{"type":"stickyip","subnet":"10.211.1.0/24"}`)
	old.setNodeRanges("10.211.1.0/24")
	keep := pod{ns: "db", name: "db-0", uid: "u1", keep: time.Hour}
	running := pod{ns: "db", name: "web", uid: "u2", keep: time.Hour}
	ip := old.mustAdd("c1", keep)
	old.del("c1")
	runIP := old.mustAdd("c2", running)
	if old.stateOf(ip[0]) != reservation.Reserved {
		t.Fatalf("db-0's %s: %s, want reserved", ip[0], old.stateOf(ip[0]))
	}

	// The Node comes back with 10.211.3.0/24.
	old.now = old.now.Add(time.Minute)
	n, dropped := old.setNodeRanges("10.211.3.0/24")
	if !slices.Equal(n.Retired, []netip.Prefix{netip.MustParsePrefix("10.211.1.0/24")}) || !n.Changed.Equal(old.now) {
		t.Fatalf("ranges after the change: %+v", n)
	}
	if len(dropped) != 1 || dropped[0].IP.String() != ip[0] {
		t.Fatalf("dropped %v, want db-0's reservation %s", dropped, ip[0])
	}
	if st := old.stateOf(ip[0]); st != "" {
		t.Errorf("db-0's reservation %s still %s", ip[0], st)
	}
	if st := old.stateOf(runIP[0]); st != reservation.Allocated {
		t.Errorf("a running pod's allocation %s: %s, want kept until its DEL", runIP[0], st)
	}
	// The network still has the old range (the lease is not renewed yet).
	_, err := old.add("c3", keep)
	if !errors.Is(err, ErrRangeRetired) {
		t.Fatalf("ADD from the old range: %v, want ErrRangeRetired", err)
	}
	// The running pod's DEL frees its address: no reservation in a range the
	// node no longer has.
	old.del("c2")
	if st := old.stateOf(runIP[0]); st != "" {
		t.Errorf("after its DEL the old range's address %s is %s, want freed", runIP[0], st)
	}

	// flanneld's new lease: the network's range is the new podCIDR.
	renewed := newWorld(t, `{"type":"stickyip","subnet":"10.211.3.0/24"}`)
	renewed.store, renewed.now = old.store, old.now
	got := renewed.mustAdd("c4", keep)
	if !netip.MustParsePrefix("10.211.3.0/24").Contains(netip.MustParseAddr(got[0])) {
		t.Errorf("db-0 after the new lease: %v, want an address of 10.211.3.0/24", got)
	}

	// The old podCIDR given back to the node: current again, not retired.
	n, _ = renewed.setNodeRanges("10.211.1.0/24")
	if len(n.Retired) != 1 || n.Retired[0].String() != "10.211.3.0/24" {
		t.Errorf("after getting the old range back: %+v", n)
	}
	if _, err := old.add("c5", pod{ns: "db", name: "db-1", uid: "u5"}); err != nil {
		t.Errorf("ADD in a range current again: %v", err)
	}
}

// Ranges unrelated to the Node's podCIDR (a bridge network with its own
// subnet) are never refused.
func TestNodeRangesUnrelatedNetwork(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.88.0.0/24"}`)
	w.setNodeRanges("10.211.1.0/24")
	w.setNodeRanges("10.211.3.0/24")
	w.mustAdd("c1", pod{ns: "db", name: "db-0", uid: "u1"})
}

// Recording the same ranges again changes nothing (no commit, no sync).
func TestNodeRangesUnchanged(t *testing.T) {
	w := newWorld(t, v4Small)
	w.setNodeRanges("10.1.0.0/24")
	err := w.store.Update("net1", func(tx reservation.Txn) error {
		_, _, err := w.eng.SetNodeRanges(tx, []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")})
		return err
	})
	if err != nil {
		t.Fatalf("the same ranges again: %v", err)
	}
	err = w.store.Update("net1", func(tx reservation.Txn) error {
		_, _, err := w.eng.SetNodeRanges(tx, nil)
		return err
	})
	if !errors.Is(err, ErrInvalidArgs) {
		t.Errorf("no pod CIDR: %v, want ErrInvalidArgs", err)
	}
}

// NodeHolds: an address is the node's while it is in the network's ranges
// and in no pod CIDR the node has lost; only those get a placement record.
func TestNodeHolds(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","ranges":[[{"subnet":"10.211.1.0/24"}],[{"subnet":"10.212.1.0/24"}]]}`)
	n := NodeRanges{Current: []netip.Prefix{netip.MustParsePrefix("10.212.1.0/24")}, Retired: []netip.Prefix{netip.MustParsePrefix("10.211.1.0/24")}}
	for ip, want := range map[string]bool{"10.212.1.5": true, "10.211.1.5": false, "10.213.1.5": false} {
		if got := w.eng.NodeHolds(n, netip.MustParseAddr(ip)); got != want {
			t.Errorf("NodeHolds(%s) = %v, want %v", ip, got, want)
		}
	}
	if !w.eng.NodeHolds(NodeRanges{}, netip.MustParseAddr("10.211.1.5")) {
		t.Error("no pod CIDR recorded: an address of the ranges is not the node's")
	}
}
