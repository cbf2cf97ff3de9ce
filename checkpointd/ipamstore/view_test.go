package ipamstore

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/ipam"
)

// An Observe of a store and a config directory that did not change reads
// neither again, but what it says is of its own time: a reservation that
// expired since counts as free, and a rebuilt network's wait ends.
func TestObserveUnchangedIsOfItsTime(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	seed(t, dir, rec("10.244.1.2", "reserved", "", "default", "web", 5*time.Minute), rec("10.244.1.3", "allocated", "sb-1", "default", "db", 0))
	clock := now
	s := NewWithEnv(dir, 2*time.Second, ipam.Env{Now: func() time.Time { return clock }}).WithCNIConfDir(writeConf(t, "cbr0", dir, `"reservation":{"reuseDelay":"0s"}`))
	v, err := s.Observe()
	if err != nil {
		t.Fatal(err)
	}
	if p := v.Pools["cbr0"]; p.Reserved != 1 || p.Allocated != 1 {
		t.Fatalf("pools %+v, want one reserved and one allocated", p)
	}
	uses, confReads := s.Uses(), ipam.ConfDirReads()
	clock = now.Add(2 * time.Hour) // past the reservation's end (rec: an hour after now)
	v, err = s.Observe()
	if err != nil {
		t.Fatal(err)
	}
	if s.Uses() != uses || ipam.ConfDirReads() != confReads {
		t.Errorf("an unchanged store was read again: %d opens, %d reads of the directory", s.Uses()-uses, ipam.ConfDirReads()-confReads)
	}
	if p := v.Pools["cbr0"]; p.Reserved != 0 || p.Allocated != 1 || !v.At.Equal(clock) {
		t.Errorf("two hours later: pools %+v at %v, want the expired reservation free", p, v.At)
	}
}
