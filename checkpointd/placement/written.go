package placement

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// WrittenFileName is the file, in checkpointd's checkpoint directory, that
// lists the shards holding this node's entries, so that after a restart the
// publisher also visits the shards whose entries ended meanwhile.
const WrittenFileName = "placement-shards.json"

// writtenFormat is the file's framing; v1 listed the shards of the index
// before stickyip-index-* (stickyip-placement-*), which this node no longer
// writes: a v1 file is read as an empty set.
const (
	writtenFormat   = "stickyip-placement-shards/v2"
	writtenFormatV1 = "stickyip-placement-shards/v1"
)

// shardRef names a shard.
type shardRef struct{ Namespace, Name string }

// compareRefs orders shards by namespace/name, the order they are written
// and read in.
func compareRefs(a, b shardRef) int {
	return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// written is the set of shards holding the node's entries, kept in a file.
// The publisher's pass and a store rebuild's read of the node's entries
// (ReadOwn) use it from two goroutines.
type written struct {
	path string // "": not kept
	mu   sync.Mutex
	set  map[shardRef]bool
}

// has reports whether ref holds the node's entries.
func (w *written) has(ref shardRef) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.set[ref]
}

// refs returns the shards holding the node's entries, in order.
func (w *written) refs() []shardRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.SortedFunc(maps.Keys(w.set), compareRefs)
}

// loadWritten reads the set from path; a missing file is an empty set, a
// damaged one an error (with the empty set: the publisher then only misses
// entries that ended while it was down, as if the file were lost).
func loadWritten(path string) (*written, error) {
	w := &written{path: path, set: map[shardRef]bool{}}
	if path == "" {
		return w, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return w, nil
	}
	if err != nil {
		return w, err
	}
	if _, err := safefile.Unframe(writtenFormatV1, data); err == nil {
		return w, nil // the former index's shards: nothing of them to visit
	}
	payload, err := safefile.Unframe(writtenFormat, data)
	if err != nil {
		return w, fmt.Errorf("%s: %w", path, err)
	}
	var refs []shardRef
	if err := json.Unmarshal(payload, &refs); err != nil {
		return w, fmt.Errorf("%s: %w", path, err)
	}
	for _, r := range refs {
		w.set[r] = true
	}
	return w, nil
}

// mark records whether ref holds the node's entries and saves the set when
// that changed.
func (w *written) mark(ref shardRef, holds bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.set[ref] == holds {
		return nil
	}
	if holds {
		w.set[ref] = true
	} else {
		delete(w.set, ref)
	}
	if w.path == "" {
		return nil
	}
	refs := slices.SortedFunc(maps.Keys(w.set), func(a, b shardRef) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	payload, err := json.Marshal(refs)
	if err != nil {
		return err
	}
	return safefile.Write(w.path, safefile.Frame(writtenFormat, payload), 0o600)
}
