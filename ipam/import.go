package ipam

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
)

// HostLocal is one host-local data directory to import. It keeps the
// directory's listing for a transaction that runs again with the room the
// import asked for (reservation.NeedRoom): a /16's 65,000 names are listed,
// parsed and sorted once.
type HostLocal struct {
	Dir    string
	listed bool
	files  []hostLocalFile // in address order
}

// Import records the allocations host-local keeps in h.Dir (one file per
// address, named by the address, holding "containerID\r\nifname") so that
// switching a live node to stickyip never hands out an address a running pod
// still has. Addresses stickyip already records are left as they are. A
// missing directory imports nothing. It returns how many records it added.
func (h *HostLocal) Import(tx reservation.Txn, rangeSets []RangeSet, bootID string, now time.Time, log *slog.Logger) (int, error) {
	// The collector runs a fifth as often during the import: a /16's
	// 65,000 names and records are garbage only once written, and a
	// process that exits after the call would otherwise spend a tenth of
	// the import scanning them (its peak grows from ~145 to ~175 MB).
	defer debug.SetGCPercent(debug.SetGCPercent(importGCPercent))
	if !h.listed {
		files, err := listHostLocal(h.Dir)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%w: reading host-local data %s: %v", reservation.ErrIO, h.Dir, err)
		}
		h.files, h.listed = files, true
	}
	dir, files := h.Dir, h.files
	if r, ok := tx.(reservation.Roomy); ok && len(files) >= bulkImport && !r.HasRoom(len(files)*importRoom) {
		return 0, &reservation.NeedRoom{Bytes: len(files) * importRoom}
	}
	if err := readHostLocalFiles(dir, files); err != nil {
		return 0, err
	}
	recs := make([]*reservation.Record, 0, len(files))
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if f.id == "" {
			log.Warn("host-local import: file without container ID, skipped", "file", path)
			continue
		}
		cur, err := tx.Get(f.ip)
		if err != nil {
			return 0, err
		}
		if cur != nil {
			if cur.ContainerID != f.id {
				log.Warn("host-local import: address already recorded by stickyip, kept stickyip's record", "ip", f.ip, "hostLocalContainer", f.id, "stickyip", cur.Holder())
			}
			continue
		}
		mtime := f.mtime
		if mtime.IsZero() {
			mtime = now
		}
		set := -1
		for i := range rangeSets {
			if rangeSets[i].Contains(net.IP(f.ip.AsSlice())) {
				set = i
				break
			}
		}
		recs = append(recs, &reservation.Record{IP: f.ip, RangeSet: set, State: reservation.Allocated, ContainerID: f.id, IfName: f.ifname,
			BootID: bootID, AllocatedAt: mtime, Imported: true, ImportedFrom: path})
	}
	// One bulk insert, each index in key order (see reservation.Txn.PutAll).
	if err := tx.PutAll(recs); err != nil {
		return 0, err
	}
	n := len(recs)
	log.Info("imported host-local allocations", "dir", dir, "count", n)
	return n, nil
}

// listHostLocal lists the allocation files in dir, in address order so
// that the records come out sorted (the directory's name order is not
// address order: 10.0.0.10 sorts before 10.0.0.2).
func listHostLocal(dir string) ([]hostLocalFile, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1) // the file system's order: os.ReadDir would sort by name first
	if err != nil {
		return nil, err
	}
	files := make([]hostLocalFile, 0, len(entries))
	for _, ent := range entries {
		ip, err := netip.ParseAddr(strings.ReplaceAll(ent.Name(), "_", ":"))
		if err != nil || !ent.Type().IsRegular() {
			continue // lock, last_reserved_ip.N, anything else
		}
		files = append(files, hostLocalFile{ip: ip.Unmap(), name: ent.Name()})
	}
	slices.SortFunc(files, func(a, b hostLocalFile) int { return a.ip.Compare(b.ip) })
	return files, nil
}

// MarkImported records that host-local's data has been imported, so the plugin
// does not import it again on first use.
func MarkImported(tx reservation.Txn, now time.Time, n int) error {
	return tx.SetMeta(metaHostLocalImported, fmt.Sprintf("%s %d", now.UTC().Format(time.RFC3339), n))
}

// maxHostLocalFile bounds what is read of one host-local file: a container
// ID, CRLF and an interface name.
const maxHostLocalFile = 4096

// An import of at least bulkImport files asks the store for room
// (reservation.NeedRoom) for importRoom bytes a file: a record, its index
// entry and room to spare.
const (
	bulkImport = 4096
	importRoom = 1024
)

// importGCPercent is the collector's GOGC during an import.
const importGCPercent = 400

// hostLocalFile is one host-local allocation file and what it says.
type hostLocalFile struct {
	ip         netip.Addr
	name       string
	id, ifname string
	mtime      time.Time
}

// importReaders bounds the goroutines reading host-local's files: opening
// 65,000 small files is most of a /16 import, and the system calls of
// different files run in parallel on a node's cores.
const importReaders = 4

// readHostLocalFiles fills in each file's container ID, interface name and
// modification time, spreading the reads over up to importReaders
// goroutines. The first file (in files' order) that cannot be read fails
// the import, naming it.
func readHostLocalFiles(dir string, files []hostLocalFile) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: reading host-local data %s: %v", reservation.ErrIO, dir, err)
	}
	defer unix.Close(fd)
	errs := make([]error, len(files))
	workers := max(min(runtime.GOMAXPROCS(0), importReaders, len(files)), 1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := make([]byte, maxHostLocalFile)
			for i := w; i < len(files); i += workers {
				f := &files[i]
				data, mtime, err := readSmall(fd, f.name, buf)
				if err != nil {
					errs[i] = fmt.Errorf("%w: reading %s: %v", reservation.ErrIO, filepath.Join(dir, f.name), err)
					continue
				}
				id, ifname, _ := strings.Cut(string(data), "\r\n")
				f.id, f.ifname, f.mtime = strings.TrimSpace(id), strings.TrimSpace(ifname), mtime
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readSmall reads the start of file name in directory dir into buf (valid
// until buf's next use) with four system calls (openat, fstat, read,
// close): os.ReadFile and DirEntry.Info take three more per file, and a /16
// has 65,000 files. It also returns the file's modification time.
//
// The calls are raw: a regular file in the page cache answers in
// microseconds, and calls that tell the scheduler they may block had the
// runtime hand each reader's processor to another thread and back, tens of
// thousands of times an import. The file is opened without updating its
// access time (O_NOATIME: 65,000 inodes not dirtied, for files host-local
// wrote and nobody has read since) and without waiting (O_NONBLOCK: a FIFO
// put in place of a file reads as empty, skipped as an empty file is,
// instead of hanging the call).
func readSmall(dir int, name string, buf []byte) ([]byte, time.Time, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return nil, time.Time{}, err
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOATIME
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(flags), 0, 0, 0)
	if e == unix.EPERM { // O_NOATIME is for the file's owner (or CAP_FOWNER): the operator tool run by another user
		r, _, e = unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(flags&^unix.O_NOATIME), 0, 0, 0)
	}
	if e != 0 {
		return nil, time.Time{}, e
	}
	fd := int(r)
	defer unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	var st unix.Stat_t
	var mtime time.Time
	size := len(buf)
	if _, _, e := unix.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(&st)), 0); e == 0 {
		mtime = time.Unix(st.Mtim.Unix()).UTC()
		if st.Size >= 0 && st.Size < int64(size) {
			size = int(st.Size) // read that much: no last read that only says the file ended
		}
	}
	n := 0
	for n < size {
		m, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[n])), uintptr(size-n))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return nil, mtime, e
		}
		if m == 0 {
			break
		}
		n += int(m)
	}
	return buf[:n], mtime, nil
}
