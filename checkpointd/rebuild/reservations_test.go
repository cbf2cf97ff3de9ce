package rebuild

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

// networks are stickyip configs by name: each "name=subnet,maxDuration".
func networks(t *testing.T, specs ...[3]string) map[string]*ipam.Config {
	t.Helper()
	out := map[string]*ipam.Config{}
	for _, s := range specs {
		c, err := ipam.LoadConfig([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"ipam":{"type":"stickyip","ranges":[[{"subnet":%q}]],"reservation":{"maxDuration":%q}}}`, s[0], s[1], s[2])), "")
		if err != nil {
			t.Fatal(err)
		}
		out[s[0]] = c
	}
	return out
}

// TestRestoredDurations: the reservation duration a checkpointed pod asks
// for, by the first network whose rules give it one (a network whose
// maxDuration is 0 gives none); a pod without the annotation, or with one
// that does not parse, asks for none.
func TestRestoredDurations(t *testing.T) {
	confs := networks(t, [3]string{"a", "10.8.0.0/24", "0s"}, [3]string{"b", "10.9.0.0/24", "1h"})
	r := newRestorer(confs, holders{running: map[reservation.Identity]bool{}, ifnames: map[string]string{}}, time.Now())
	got := r.durations([]*checkpoint.Record{
		checkpointOf("prod", "db-0", sticky30),
		checkpointOf("prod", "web", nil),
		checkpointOf("prod", "bad", map[string]string{contract.AnnotationReservedDuration: "soon"}),
	})
	want := map[reservation.Identity]time.Duration{{Namespace: "prod", Name: "db-0"}: 30 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("durations %v, want %v", got, want)
	}
}

// TestRestoredFromCheckpoint: a checkpointed sticky pod that no sandbox
// runs gets its address back, reserved for its duration from now, on the
// interface most of the network's sandboxes use (ties: the first by name);
// a pod without a reservation gets nothing back.
func TestRestoredFromCheckpoint(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	confs := networks(t, [3]string{"net1", "10.9.0.0/24", "1h"})
	for _, tc := range []struct {
		name    string
		ifnames []string // the interfaces of the store's allocations
		want    string
	}{
		{"no sandbox: eth0", nil, "eth0"},
		{"most sandboxes on net1", []string{"net1", "net1", "eth0"}, "net1"},
		{"a tie: the first by name", []string{"net1", "eth1"}, "eth1"},
		{"a tie of six", []string{"net4", "net2", "net6", "net1", "net5", "net3"}, "net1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The same answer every time, whatever order a map gives.
			for range 10 {
				restoredOn(t, confs, now, tc.ifnames, tc.want)
			}
		})
	}
}

// restoredOn checks that a checkpointed pod is restored on interface want
// when the store's allocations are on ifnames.
func restoredOn(t *testing.T, confs map[string]*ipam.Config, now time.Time, ifnames []string, want string) {
	t.Helper()
	var entries []reservation.Entry
	for i, ifname := range ifnames {
		entries = append(entries, reservation.Entry{Network: "net1", Record: &reservation.Record{State: reservation.Allocated, IfName: ifname,
			IP:       netip.MustParseAddr(fmt.Sprintf("10.9.0.%d", 10+i)),
			Identity: reservation.Identity{Namespace: "prod", Name: fmt.Sprintf("p%d", i), IfName: ifname}}})
	}
	r := newRestorer(confs, storeHolders(entries), now)
	got := r.fromCheckpoint(checkpointOf("prod", "db-0", sticky30, "10.9.0.5"))["net1"]
	if len(got) != 1 || got[0].Identity != (reservation.Identity{Namespace: "prod", Name: "db-0", IfName: want}) ||
		!got[0].Until.Equal(now.Add(30*time.Minute)) || fmt.Sprint(got[0].IPs) != "[10.9.0.5]" {
		t.Fatalf("allocations on %v: restored %+v, want prod/db-0 on %s, 10.9.0.5 until %v", ifnames, got, want, now.Add(30*time.Minute))
	}
	if got := r.fromCheckpoint(checkpointOf("prod", "web", nil, "10.9.0.6")); len(got["net1"]) != 0 {
		t.Fatalf("a pod without a reservation: restored %+v", got)
	}
}
