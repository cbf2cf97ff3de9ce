// Package storetest holds the behaviour every reservation store must have, as
// a test run against both the bbolt store and the in-memory fake, so the fake
// the engine tests use cannot drift from the real store.
package storetest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// Updater runs fn in one transaction on network; a non-nil error from fn
// discards every change fn made.
type Updater func(network string, fn func(reservation.Txn) error) error

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func rec(ip, cid, ns, name string, st reservation.State, exp time.Duration) *reservation.Record {
	r := &reservation.Record{IP: netip.MustParseAddr(ip), State: st, ContainerID: cid, IfName: "eth0", AllocatedAt: t0}
	if name != "" {
		r.Identity = reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}
	}
	if st == reservation.Reserved {
		r.ContainerID = ""
		r.ExpiresAt = t0.Add(exp)
	}
	return r
}

func ips(rs []*reservation.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.IP.String())
	}
	slices.Sort(out)
	return out
}

// Run checks the Txn contract of a store.
func Run(t *testing.T, update Updater) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(update("n1", func(tx reservation.Txn) error {
		for _, r := range []*reservation.Record{
			rec("10.0.0.2", "c1", "default", "web", reservation.Allocated, 0),
			rec("fd00::2", "c1", "default", "web", reservation.Allocated, 0),
			rec("10.0.0.3", "c2", "", "", reservation.Allocated, 0),
			rec("10.0.0.4", "", "default", "db", reservation.Reserved, 2*time.Hour),
			rec("10.0.0.5", "", "default", "old", reservation.Reserved, time.Hour),
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return tx.SetMeta("k", "v")
	}))

	t.Run("indexes", func(t *testing.T) {
		must(update("n1", func(tx reservation.Txn) error {
			byC, err := tx.ByContainer("c1", "eth0")
			must(err)
			if got := ips(byC); !slices.Equal(got, []string{"10.0.0.2", "fd00::2"}) {
				t.Errorf("ByContainer(c1) = %v", got)
			}
			byID, err := tx.ByIdentity(reservation.Identity{Namespace: "default", Name: "db", IfName: "eth0"})
			must(err)
			if got := ips(byID); !slices.Equal(got, []string{"10.0.0.4"}) {
				t.Errorf("ByIdentity(db) = %v", got)
			}
			byNS, err := tx.ByNamespace("default")
			must(err)
			if got := ips(byNS); !slices.Equal(got, []string{"10.0.0.2", "10.0.0.4", "10.0.0.5", "fd00::2"}) {
				t.Errorf("ByNamespace(default) = %v", got)
			}
			if byNS, _ := tx.ByNamespace("def"); len(byNS) != 0 { // a prefix of a namespace is not that namespace
				t.Errorf("ByNamespace(def) = %v", ips(byNS))
			}
			var order []string
			must(tx.ByExpiry(func(r *reservation.Record) bool { order = append(order, r.IP.String()); return true }))
			if !slices.Equal(order, []string{"10.0.0.5", "10.0.0.4"}) {
				t.Errorf("ByExpiry order = %v", order)
			}
			var used []string
			must(tx.UsedFrom(netip.MustParseAddr("10.0.0.3"), func(a netip.Addr) bool { used = append(used, a.String()); return true }))
			if !slices.Equal(used, []string{"10.0.0.3", "10.0.0.4", "10.0.0.5"}) {
				t.Errorf("UsedFrom(10.0.0.3) = %v (must stay in IPv4)", used)
			}
			if v, _ := tx.Meta("k"); v != "v" {
				t.Errorf("Meta = %q", v)
			}
			return nil
		}))
	})

	t.Run("PutAll is Put for each record, in any order", func(t *testing.T) {
		must(update("bulk", func(tx reservation.Txn) error {
			must(tx.Put(rec("10.1.0.9", "old", "bulk", "x", reservation.Allocated, 0)))
			must(tx.PutAll([]*reservation.Record{
				rec("10.1.0.10", "c-b", "bulk", "b", reservation.Allocated, 0),
				rec("10.1.0.9", "c-a", "bulk", "a", reservation.Allocated, 0), // replaces "old"
				rec("10.1.0.2", "", "bulk", "r", reservation.Reserved, time.Hour),
			}))
			if byC, _ := tx.ByContainer("old", "eth0"); len(byC) != 0 {
				t.Errorf("the replaced record's index entry stayed: %v", ips(byC))
			}
			if byC, _ := tx.ByContainer("c-a", "eth0"); !slices.Equal(ips(byC), []string{"10.1.0.9"}) {
				t.Errorf("ByContainer(c-a) = %v", ips(byC))
			}
			var used []string
			must(tx.UsedFrom(netip.MustParseAddr("10.1.0.0"), func(a netip.Addr) bool { used = append(used, a.String()); return true }))
			if !slices.Equal(used, []string{"10.1.0.2", "10.1.0.9", "10.1.0.10"}) {
				t.Errorf("UsedFrom = %v", used)
			}
			err := tx.PutAll([]*reservation.Record{rec("10.1.0.20", "d", "bulk", "d", reservation.Allocated, 0), rec("10.1.0.20", "e", "bulk", "e", reservation.Allocated, 0)})
			if err == nil {
				t.Error("PutAll accepted one address twice")
			}
			return nil
		}))
	})

	t.Run("state change moves index entries", func(t *testing.T) {
		must(update("n1", func(tx reservation.Txn) error {
			r, err := tx.Get(netip.MustParseAddr("10.0.0.2"))
			must(err)
			r.State, r.ContainerID, r.ExpiresAt = reservation.Reserved, "", t0.Add(time.Minute)
			must(tx.Put(r))
			byC, _ := tx.ByContainer("c1", "eth0")
			if got := ips(byC); !slices.Equal(got, []string{"fd00::2"}) {
				t.Errorf("after reserving 10.0.0.2 ByContainer(c1) = %v", got)
			}
			var first string
			must(tx.ByExpiry(func(r *reservation.Record) bool { first = r.IP.String(); return false }))
			if first != "10.0.0.2" {
				t.Errorf("soonest expiry = %s", first)
			}
			must(tx.Delete(netip.MustParseAddr("10.0.0.2")))
			must(tx.Delete(netip.MustParseAddr("10.0.0.99"))) // missing: not an error
			byID, _ := tx.ByIdentity(reservation.Identity{Namespace: "default", Name: "web", IfName: "eth0"})
			if got := ips(byID); !slices.Equal(got, []string{"fd00::2"}) {
				t.Errorf("after delete ByIdentity(web) = %v", got)
			}
			return nil
		}))
	})

	t.Run("a cooling record keeps its last identity, unindexed", func(t *testing.T) {
		last := reservation.Identity{Namespace: "cool", Name: "web", IfName: "eth0"}
		must(update("n3", func(tx reservation.Txn) error {
			return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.3.0.2"), State: reservation.Cooling, AllocatedAt: t0,
				ReleasedAt: t0, ExpiresAt: t0.Add(time.Minute), LastIdentity: last})
		}))
		must(update("n3", func(tx reservation.Txn) error {
			r, err := tx.Get(netip.MustParseAddr("10.3.0.2"))
			must(err)
			if r == nil || r.LastIdentity != last || !r.Identity.IsZero() {
				t.Errorf("cooling record read back as %+v", r)
			}
			byID, _ := tx.ByIdentity(last)
			byNS, _ := tx.ByNamespace("cool")
			if len(byID)+len(byNS) != 0 {
				t.Errorf("a cooling record is found by its last identity: %v %v", ips(byID), ips(byNS))
			}
			return nil
		}))
	})

	t.Run("failed transaction changes nothing", func(t *testing.T) {
		boom := errors.New("boom")
		err := update("n1", func(tx reservation.Txn) error {
			must(tx.Delete(netip.MustParseAddr("10.0.0.3")))
			must(tx.Put(rec("10.0.0.9", "c9", "", "", reservation.Allocated, 0)))
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		must(update("n1", func(tx reservation.Txn) error {
			a, _ := tx.Get(netip.MustParseAddr("10.0.0.3"))
			b, _ := tx.Get(netip.MustParseAddr("10.0.0.9"))
			if a == nil || b != nil {
				t.Errorf("rolled-back changes are visible: .3=%v .9=%v", a, b)
			}
			return nil
		}))
	})

	t.Run("ErrNoChange rolls back and succeeds", func(t *testing.T) {
		err := update("n1", func(tx reservation.Txn) error {
			must(tx.Delete(netip.MustParseAddr("10.0.0.3")))
			return fmt.Errorf("done early: %w", reservation.ErrNoChange)
		})
		if err != nil {
			t.Fatalf("Update returned %v", err)
		}
		must(update("n1", func(tx reservation.Txn) error {
			if r, _ := tx.Get(netip.MustParseAddr("10.0.0.3")); r == nil {
				t.Error("a change made before ErrNoChange was kept")
			}
			return nil
		}))
	})

	t.Run("networks are separate", func(t *testing.T) {
		must(update("n2", func(tx reservation.Txn) error {
			r, _ := tx.Get(netip.MustParseAddr("10.0.0.3"))
			if r != nil {
				t.Errorf("network n2 sees n1's record")
			}
			return nil
		}))
	})

	t.Run("invalid record refused", func(t *testing.T) {
		err := update("n1", func(tx reservation.Txn) error {
			return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.0.0.7"), State: reservation.Allocated})
		})
		if err == nil {
			t.Fatal("allocated record without container ID accepted")
		}
	})
}
