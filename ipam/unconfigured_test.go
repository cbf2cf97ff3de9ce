package ipam

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// TestUnconfiguredNetworks: a network whose conflist was switched back to
// host-local (flannel's own cni-conf.json), one that now keeps its records
// in another store, and one no longer configured at all are reported with
// their sticky records (live reservations, allocations with a duration)
// and what the configuration has instead; a network still configured here,
// and records with nothing to lose (plain allocations, cooling, expired
// reservations), are not.
func TestUnconfiguredNetworks(t *testing.T) {
	dir, dataDir := t.TempDir(), "/var/lib/cni/stickyip"
	flannel := writeConfFile(t, dir, "10-flannel.conflist", `{"name":"cbr0","cniVersion":"1.0.0","plugins":[
		{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	moved := writeConfFile(t, dir, "20-moved.conflist", `{"name":"moved","plugins":[{"type":"bridge","ipam":{"type":"stickyip","subnet":"10.3.0.0/24","dataDir":"/elsewhere"}}]}`)
	writeConfFile(t, dir, "30-kept.conflist", `{"name":"kept","plugins":[{"type":"bridge","ipam":{"type":"stickyip","subnet":"10.4.0.0/24"}}]}`)
	now := time.Now()
	rec := func(network, ip string, st reservation.State, d time.Duration, expires time.Time) reservation.Entry {
		return reservation.Entry{Network: network, Record: &reservation.Record{IP: netip.MustParseAddr(ip), State: st, Duration: d, ExpiresAt: expires,
			Identity: reservation.Identity{Namespace: "default", Name: "p" + ip, IfName: "eth0"}}}
	}
	entries := []reservation.Entry{
		rec("cbr0", "10.244.1.2", reservation.Reserved, time.Hour, now.Add(time.Hour)),
		rec("cbr0", "10.244.1.3", reservation.Allocated, time.Hour, time.Time{}),
		rec("cbr0", "10.244.1.4", reservation.Allocated, 0, time.Time{}),
		rec("cbr0", "10.244.1.5", reservation.Reserved, time.Hour, now.Add(-time.Second)),
		rec("cbr0", "10.244.1.6", reservation.Cooling, 0, now.Add(time.Minute)),
		rec("moved", "10.3.0.2", reservation.Reserved, time.Hour, now.Add(time.Hour)),
		rec("gone", "10.5.0.2", reservation.Allocated, time.Minute, time.Time{}),
		rec("kept", "10.4.0.2", reservation.Reserved, time.Hour, now.Add(time.Hour)),
		rec("plain", "10.6.0.2", reservation.Allocated, 0, time.Time{}),
	}
	got, err := UnconfiguredNetworks(dir, dataDir, entries, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []UnconfiguredNetwork{
		{Network: "cbr0", Reserved: 1, Sticky: 1, Now: flannel + " gives it IPAM host-local (the flannel plugin's default)"},
		{Network: "gone", Sticky: 1, Now: "no config of network gone in " + dir},
		{Network: "moved", Reserved: 1, Now: moved + " keeps its records in /elsewhere"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnconfiguredNetworks:\n got %+v\nwant %+v", got, want)
	}
	// The only stickyip network of a conf dir, moved to another store.
	alone := t.TempDir()
	movedAlone := writeConfFile(t, alone, "20-moved.conflist", `{"name":"moved","plugins":[{"type":"bridge","ipam":{"type":"stickyip","subnet":"10.3.0.0/24","dataDir":"/elsewhere"}}]}`)
	if got, err := UnconfiguredNetworks(alone, dataDir, entries[5:6], now); err != nil || len(got) != 1 || got[0].Now != movedAlone+" keeps its records in /elsewhere" {
		t.Errorf("UnconfiguredNetworks of a dir configuring moved alone: %+v (%v)", got, err)
	}
	// The same records, seen from /elsewhere: only "moved" is configured there.
	if got, _ := UnconfiguredNetworks(dir, "/elsewhere/", entries[5:6], now); len(got) != 0 {
		t.Errorf("moved's record in its configured store reported: %+v", got)
	}
}
