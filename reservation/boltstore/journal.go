package boltstore

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// JournalFile holds the changes of the calls answered by UpdateJournaled
// since the database was last written: appended, never synced, applied by
// every later call before its own work and emptied by the next write.
//
// Each entry is a frame: its length (4 bytes, little endian), the 64-bit
// FNV-1a hash of its payload (8 bytes; bbolt's own checksum, with no table
// to build at every process start) and the payload, a JSON journalEntry. An entry
// counts only if its frame is whole, its checksum matches, it was made on
// the database as it is now (the file's inode and bbolt's transaction ID,
// which every commit changes) and its number follows the previous one's;
// reading stops at the first that does not. So a write cut short by a
// crash, the pages a power loss did not keep, and entries a commit already
// applied are all ignored, and the database is never written unsynced.
const JournalFile = "stickyip.journal"

// Journal bounds: beyond maxJournalEntries entries, or when one call
// changes more than maxJournalOps records, UpdateJournaled commits (synced)
// instead, so no call reads a long journal. maxJournalBytes bounds what is
// read of the file.
const (
	maxJournalEntries = 32
	maxJournalOps     = 64
	maxJournalBytes   = 4 << 20
)

// frameHeader is a frame's length and checksum.
const frameHeader = 12

// checksum is a frame's checksum of payload.
func checksum(payload []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(payload)
	return h.Sum64()
}

// journalBase names the database an entry was made on.
type journalBase struct {
	Inode uint64 `json:"inode"`
	Txid  uint64 `json:"txid"` // the last committed transaction
}

// journalEntry is one call's changes.
type journalEntry struct {
	Base journalBase `json:"base"`
	Seq  int         `json:"seq"` // 1 for the first entry on Base
	Ops  []journalOp `json:"ops"`
}

// journalOp is one change of a network's records: a record put (its JSON),
// an address deleted, or a bookkeeping value set.
type journalOp struct {
	Net  string          `json:"net"`
	Put  json.RawMessage `json:"put,omitempty"`
	Del  *netip.Addr     `json:"del,omitempty"`
	Meta *[2]string      `json:"meta,omitempty"`
}

// journal is the journal as read under the lock.
type journal struct {
	path    string
	base    journalBase
	entries []journalEntry
	valid   int64 // bytes of the valid entries
	size    int64 // bytes in the file
}

// baseOf returns the base of tx's database: its file's inode and the last
// committed transaction (tx is a write transaction, whose ID is one more).
// The caller holds the lock, so the file is the one tx reads.
func baseOf(tx *bolt.Tx) (journalBase, error) {
	db := tx.DB()
	fi, err := os.Stat(db.Path())
	if err != nil {
		return journalBase{}, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return journalBase{}, fmt.Errorf("%w: no inode for %s", reservation.ErrIO, db.Path())
	}
	return journalBase{Inode: st.Ino, Txid: uint64(tx.ID()) - 1}, nil
}

// readJournal reads the valid entries made on base.
func (s *Store) readJournal(base journalBase) (*journal, error) {
	j := &journal{path: filepath.Join(s.dir, JournalFile), base: base}
	f, err := os.Open(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJournalBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", reservation.ErrIO, j.path, err)
	}
	j.size = int64(len(data))
	if fi, err := f.Stat(); err == nil {
		j.size = fi.Size()
	}
	for off := 0; len(data)-off >= frameHeader; {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint64(data[off+4:])
		if n > len(data)-off-frameHeader {
			break
		}
		payload := data[off+frameHeader : off+frameHeader+n]
		var e journalEntry
		if checksum(payload) != sum || json.Unmarshal(payload, &e) != nil ||
			e.Base != base || e.Seq != len(j.entries)+1 {
			break
		}
		j.entries = append(j.entries, e)
		off += frameHeader + n
		j.valid = int64(off)
	}
	return j, nil
}

// pending reads the journal of tx's database and makes its changes in tx
// (a write transaction).
func (s *Store) pending(tx *bolt.Tx) (*journal, error) {
	base, err := baseOf(tx)
	if err != nil {
		return nil, err
	}
	j, err := s.readJournal(base)
	if err != nil {
		return nil, err
	}
	return j, j.apply(tx)
}

// apply makes the entries' changes in tx.
func (j *journal) apply(tx *bolt.Tx) error {
	for _, e := range j.entries {
		for _, op := range e.Ops {
			t, err := openNetwork(tx, op.Net, true)
			if err != nil {
				return err
			}
			switch {
			case op.Put != nil:
				var r reservation.Record
				if err := json.Unmarshal(op.Put, &r); err != nil {
					return fmt.Errorf("%w: %s: %v", reservation.ErrCorrupt, j.path, err)
				}
				err = t.Put(&r)
			case op.Del != nil:
				err = t.Delete(*op.Del)
			case op.Meta != nil:
				err = t.SetMeta(op.Meta[0], op.Meta[1])
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// add appends an entry of ops after the valid ones (cutting off whatever
// follows them: a frame a crash cut short), without syncing.
func (j *journal) add(ops []journalOp) error {
	payload, err := json.Marshal(journalEntry{Base: j.base, Seq: len(j.entries) + 1, Ops: ops})
	if err != nil {
		return err
	}
	frame := make([]byte, frameHeader, frameHeader+len(payload))
	binary.LittleEndian.PutUint32(frame, uint32(len(payload)))
	binary.LittleEndian.PutUint64(frame[4:], checksum(payload))
	frame = append(frame, payload...)
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", reservation.ErrIO, err)
	}
	if j.size > j.valid {
		err = f.Truncate(j.valid)
	}
	if err == nil {
		_, err = f.WriteAt(frame, j.valid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: appending to %s: %v", reservation.ErrIO, j.path, err)
	}
	return nil
}

// clear empties the journal once a commit holds its changes (a journal
// left by a crash before this is stale: the commit changed the base).
func (j *journal) clear() error {
	if j.size == 0 {
		return nil
	}
	if err := os.Truncate(j.path, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: emptying %s: %v", reservation.ErrIO, j.path, err)
	}
	return nil
}
