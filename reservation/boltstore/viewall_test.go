package boltstore

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// TestViewAll: one read of every network that has records, in name order,
// each with its own records; no database is no network; an error of fn
// names its network; a database without its networks bucket is damaged.
func TestViewAll(t *testing.T) {
	s := newStore(t)
	for _, n := range []string{"net-b", "net-a"} {
		ip := map[string]string{"net-a": "10.0.0.2", "net-b": "10.1.0.2"}[n]
		if err := s.Update(n, func(tx reservation.Txn) error {
			return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: "c-" + n, IfName: "eth0"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	err := s.ViewAll(func(n string, tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error {
			seen = append(seen, n+" "+r.IP.String()+" "+r.ContainerID)
			return nil
		})
	})
	if want := "net-a 10.0.0.2 c-net-a, net-b 10.1.0.2 c-net-b"; err != nil || strings.Join(seen, ", ") != want {
		t.Fatalf("ViewAll saw %q (%v), want %q", strings.Join(seen, ", "), err, want)
	}

	boom := errors.New("boom")
	if err := s.ViewAll(func(n string, _ reservation.Txn) error {
		if n == "net-b" {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "network net-b") {
		t.Fatalf("fn failing on net-b: %v, want its error naming the network", err)
	}

	called := false
	if err := New(filepath.Join(t.TempDir(), "absent"), time.Second).ViewAll(func(string, reservation.Txn) error { called = true; return nil }); err != nil || called {
		t.Fatalf("no database: %v, fn called %v; want no network", err, called)
	}

	damaged := New(t.TempDir(), time.Second)
	put(t, damaged, "10.0.0.2")
	db, err := bolt.Open(damaged.Path(), 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketNetworks) }))
	must(t, db.Close())
	if err := damaged.ViewAll(func(string, reservation.Txn) error { return nil }); !errors.Is(err, reservation.ErrCorrupt) {
		t.Fatalf("no networks bucket: %v, want ErrCorrupt", err)
	}
}
