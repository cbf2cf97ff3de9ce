package daemon

import "testing"

var sink []byte

// A release (a collection and the freed heap handed back) follows only a
// pass that allocated releaseAfter since the last one: an idle pass at
// 110 pods allocates less, and a collection after each was a third of
// checkpointd's CPU.
func TestReleaseOnlyAfterAllocations(t *testing.T) {
	m := newMemoryReleaser()
	m.release() // the first: everything allocated since the start
	if m.release() {
		t.Error("released with next to nothing allocated since the last release")
	}
	sink = make([]byte, 2*releaseAfter)
	if !m.release() {
		t.Errorf("not released after %d bytes allocated", len(sink))
	}
}
