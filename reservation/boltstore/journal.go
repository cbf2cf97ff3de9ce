package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"syscall"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
)

// JournalFile holds the changes of the calls answered by UpdateJournaled
// since the database was last written: appended, never synced, applied by
// every later call before its own work and made void by the next commit.
//
// Each entry is a frame: its length (4 bytes, little endian), the 64-bit
// FNV-1a hash of its payload (8 bytes; bbolt's own checksum, with no table
// to build at every process start) and the payload, a journalEntry (its
// encoding: journalEntry.encode).
// An entry counts only if its frame is whole, its checksum matches, it was
// made on the database as it is now (the file's inode and bbolt's
// transaction ID, which every commit changes) and its number follows the
// previous one's; reading stops at the first that does not. So a write cut
// short by a crash, the pages a power loss did not keep, and entries a
// commit already holds are all ignored, and the database is never written
// unsynced.
//
// The file is journalSize bytes, written whole (zeros) when it is made; it
// never grows or shrinks after that. An entry is written after the valid
// ones with an empty frame header after it, and a commit voids them all by
// zeroing the first header: neither changes the file's size, so neither
// has the file system write the journal out with the next commit's
// fdatasync (ext4, data=ordered, does for a file whose size changed).
const JournalFile = "stickyip.journal"

// Journal bounds: beyond maxJournalEntries entries, when one call changes
// more than maxJournalOps records, or when the file has no room left,
// UpdateJournaled commits (synced) instead, so no call reads a long
// journal.
const (
	maxJournalEntries = 32
	maxJournalOps     = 64
	journalSize       = 64 << 10
)

// frameHeader is a frame's length and checksum.
const frameHeader = 12

// checksum is a frame's checksum of payload.
func checksum(payload []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(payload)
	return h.Sum64()
}

// journal is the journal as read under the lock.
type journal struct {
	path    string
	fd      int // open for reading and writing; -1 while there is no file
	eof     bool
	base    journalBase
	entries []journalEntry
	valid   int64 // bytes of the valid entries
	head    bool  // the first frame header is not empty (entries, valid or not)
}

// emptyHeader ends the valid entries, and voids them all at offset 0.
var emptyHeader = make([]byte, frameHeader)

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

// readJournal reads the valid entries made on base (the file's first
// page, and more only for entries that go on beyond it). The caller closes
// the journal.
func (s *Store) readJournal(base journalBase) (*journal, error) {
	j := &journal{path: filepath.Join(s.dir, JournalFile), fd: -1, base: base}
	fd, err := unix.Open(j.path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return j, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %v", reservation.ErrIO, j.path, err)
	}
	j.fd = fd
	if err := j.read(); err != nil {
		j.close()
		return nil, err
	}
	return j, nil
}

// read reads the valid entries.
func (j *journal) read() error {
	var data []byte
	var err error
	for off := 0; ; {
		if data, err = j.fill(data, off+frameHeader); err != nil {
			return err
		}
		if len(data)-off < frameHeader {
			break
		}
		if off == 0 {
			j.head = !bytes.Equal(data[:frameHeader], emptyHeader)
		}
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint64(data[off+4:])
		if n > journalSize {
			break
		}
		if data, err = j.fill(data, off+frameHeader+n); err != nil {
			return err
		}
		if n > len(data)-off-frameHeader {
			break
		}
		payload := data[off+frameHeader : off+frameHeader+n]
		if checksum(payload) != sum {
			break
		}
		e, err := decodeEntry(payload)
		if err != nil || e.Base != j.base || int(e.Seq) != len(j.entries)+1 || e.decodeRecords() != nil {
			break
		}
		j.entries = append(j.entries, e)
		off += frameHeader + n
		j.valid = int64(off)
	}
	return nil
}

// fill reads the file into data until it holds n bytes (whole pages, at
// most journalSize), or the file ends.
func (j *journal) fill(data []byte, n int) ([]byte, error) {
	if len(data) >= n || j.eof {
		return data, nil
	}
	want := min((n+4095)/4096*4096, journalSize)
	if want <= len(data) {
		return data, nil
	}
	data = append(data, make([]byte, want-len(data))...)[:len(data)]
	for len(data) < want {
		m, err := unix.Pread(j.fd, data[len(data):want], int64(len(data)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s: %v", reservation.ErrIO, j.path, err)
		}
		if m == 0 {
			j.eof = true
			break
		}
		data = data[:len(data)+m]
	}
	return data, nil
}

// close closes the journal's file.
func (j *journal) close() {
	if j != nil && j.fd >= 0 {
		_ = unix.Close(j.fd)
		j.fd = -1
	}
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
			case op.rec != nil:
				err = t.Put(op.rec)
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

// add writes an entry of ops after the valid ones, followed by an empty
// frame header (whatever follows, a frame a crash cut short, no longer
// counts), without syncing. It returns false, having written nothing, when
// the file has no room for it.
func (j *journal) add(ops []journalOp) (bool, error) {
	payload := journalEntry{Base: j.base, Seq: uint32(len(j.entries) + 1), Ops: ops}.encode()
	frame := make([]byte, frameHeader, 2*frameHeader+len(payload))
	binary.LittleEndian.PutUint32(frame, uint32(len(payload)))
	binary.LittleEndian.PutUint64(frame[4:], checksum(payload))
	frame = append(append(frame, payload...), emptyHeader...)
	if j.valid+int64(len(frame)) > journalSize {
		return false, nil
	}
	if j.fd < 0 {
		fd, err := unix.Open(j.path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return false, fmt.Errorf("%w: creating %s: %v", reservation.ErrIO, j.path, err)
		}
		j.fd = fd
	}
	var st unix.Stat_t
	if err := unix.Fstat(j.fd, &st); err != nil {
		return false, fmt.Errorf("%w: %s: %v", reservation.ErrIO, j.path, err)
	}
	if st.Size < journalSize { // made now (or cut): written whole once
		if err := j.pwrite(make([]byte, journalSize-st.Size), st.Size); err != nil {
			return false, err
		}
	}
	return true, j.pwrite(frame, j.valid)
}

// pwrite writes b at off.
func (j *journal) pwrite(b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(j.fd, b, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: writing %s: %v", reservation.ErrIO, j.path, err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// clear voids the entries once a commit holds their changes, by zeroing
// the first frame header, so that readers see at once that there are none
// (entries left by a crash before this are ignored all the same: the
// commit changed the base).
func (j *journal) clear() error {
	if !j.head || j.fd < 0 {
		return nil
	}
	return j.pwrite(emptyHeader, 0)
}

// journalHead reports whether the journal in dir may hold entries: its
// first frame header is not empty.
func journalHead(dir string) bool {
	fd, err := unix.Open(filepath.Join(dir, JournalFile), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	head := make([]byte, frameHeader)
	n, _ := unix.Pread(fd, head, 0)
	return n == frameHeader && !bytes.Equal(head, emptyHeader)
}
