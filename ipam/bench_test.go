package ipam

import (
	"crypto/sha256"

	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// Engine micro-benchmarks on the real bbolt store: each op is one synced
// transaction, as in the plugin (minus process start-up). Sizes are the number
// of allocations already in the store. `make bench` runs them; `make test`
// does not.

var benchSizes = []int{1000, 10000, 60000}

func seededStore(b *testing.B, n int, reserved bool) (*boltstore.Store, *Engine) {
	b.Helper()
	conf, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"bench","ipam":{"type":"stickyip","subnet":"10.100.0.0/16","hostLocalDataDir":""}}`), "")
	if err != nil {
		b.Fatal(err)
	}
	st := boltstore.New(b.TempDir(), 0)
	now := time.Now()
	eng := NewEngine(conf, Env{Now: func() time.Time { return now }, BootID: "bench"})
	err = st.Update("bench", func(tx reservation.Txn) error {
		a := netip.MustParseAddr("10.100.0.2")
		for i := range n {
			r := &reservation.Record{IP: a, State: reservation.Allocated, ContainerID: fmt.Sprintf("seed-%d", i), IfName: "eth0",
				BootID: "bench", AllocatedAt: now, Identity: reservation.Identity{Namespace: "seed", Name: fmt.Sprintf("p%d", i), IfName: "eth0"}}
			if reserved {
				r.State, r.ContainerID, r.ExpiresAt = reservation.Reserved, "", now.Add(time.Hour)
			}
			if err := tx.Put(r); err != nil {
				return err
			}
			a = a.Next()
		}
		return tx.SetMeta(metaBootID, "bench")
	})
	if err != nil {
		b.Fatal(err)
	}
	return st, eng
}

func benchAddDel(b *testing.B, n int, reserved bool, keep time.Duration) {
	st, eng := seededStore(b, n, reserved)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cid := fmt.Sprintf("bench-%d", i)
		req := AddRequest{ContainerID: cid, IfName: "eth0", Identity: reservation.Identity{Namespace: "b", Name: cid, IfName: "eth0"}, Duration: keep}
		if err := st.Update("bench", func(tx reservation.Txn) error { _, err := eng.Add(tx, req); return err }); err != nil {
			b.Fatal(err)
		}
		if err := st.Update("bench", func(tx reservation.Txn) error { return eng.Del(tx, cid, "eth0") }); err != nil {
			b.Fatal(err)
		}
		if keep > 0 { // drop the reservation again so the pool does not fill up
			if err := st.Update("bench", func(tx reservation.Txn) error {
				recs, err := tx.ByIdentity(req.Identity)
				for _, r := range recs {
					err = tx.Delete(r.IP)
				}
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAllocateRelease: ADD then DEL (freed) with n allocations present.
func BenchmarkAllocateRelease(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) { benchAddDel(b, n, false, 0) })
	}
}

// BenchmarkReserve: ADD, DEL into a reservation, release, with n reservations present.
func BenchmarkReserve(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("reservations=%d", n), func(b *testing.B) { benchAddDel(b, n, true, time.Hour) })
	}
}

// BenchmarkLookup: find a container's allocation (the DEL/CHECK path) in a read transaction.
func BenchmarkLookup(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) {
			st, _ := seededStore(b, n, false)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				err := st.View("bench", func(tx reservation.Txn) error {
					recs, err := tx.ByContainer(fmt.Sprintf("seed-%d", i%n), "eth0")
					if len(recs) != 1 {
						return fmt.Errorf("lookup found %d", len(recs))
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAllocateNearlyFull: ADD+DEL in a /16 with 65,520 of 65,533 usable
// addresses taken, with reuseDelay 0 (host-local's behaviour): the search for
// the next free address in a nearly full pool.
func BenchmarkAllocateNearlyFull(b *testing.B) { benchNearlyFull(b, 0) }

// BenchmarkAllocateNearlyFullCooling: the same with the default reuse delay.
// After 13 ops every free address is cooling down, so each ADD takes the
// pool-full path: release allocations of dead sandboxes (a walk over every
// record), then the address freed longest ago. The figure is that walk's
// cost at 65,520 records; a node's /24 has at most 253.
func BenchmarkAllocateNearlyFullCooling(b *testing.B) { benchNearlyFull(b, DefaultReuseDelay) }

func benchNearlyFull(b *testing.B, reuseDelay time.Duration) {
	st, eng := seededStore(b, 65520, false)
	eng.reuseDelay = reuseDelay
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		cid := fmt.Sprintf("bench-%d", i)
		err := st.Update("bench", func(tx reservation.Txn) error {
			if _, err := eng.Add(tx, AddRequest{ContainerID: cid, IfName: "eth0"}); err != nil {
				return err
			}
			return eng.Del(tx, cid, "eth0")
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// hostLocalDir writes n host-local allocation files (what a /16 node that ran
// host-local has) and returns the directory.
func hostLocalDir(b testing.TB, n int) string {
	b.Helper()
	dir := b.TempDir()
	a := netip.MustParseAddr("10.100.0.2")
	for i := range n {
		id := sha256.Sum256([]byte(fmt.Sprint(i))) // container IDs are hashes: random order
		body := fmt.Sprintf("%x\r\neth0", id)
		if err := os.WriteFile(filepath.Join(dir, a.String()), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
		a = a.Next()
	}
	return dir
}

// BenchmarkImportHostLocal16: the first CNI call on a node switching from
// host-local with a full /16 imports every allocation in one transaction
// (the runtime waits for it: it must stay far below its CNI timeout).
func BenchmarkImportHostLocal16(b *testing.B) {
	const n = 65512
	dir := hostLocalDir(b, n)
	conf, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"bench","ipam":{"type":"stickyip","subnet":"10.100.0.0/16"}}`), "")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for b.Loop() {
		st := boltstore.New(b.TempDir(), time.Minute)
		err := st.Update("bench", func(tx reservation.Txn) error {
			got, err := (&HostLocal{Dir: dir}).Import(tx, conf.Ranges, "bench", now, slog.New(slog.DiscardHandler))
			if err == nil && got != n {
				err = fmt.Errorf("imported %d, want %d", got, n)
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
