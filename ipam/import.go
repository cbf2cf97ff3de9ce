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
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/reservation"
)

// ImportHostLocal records the allocations host-local keeps in dir (one file per
// address, named by the address, holding "containerID\r\nifname") so that
// switching a live node to stickyip never hands out an address a running pod
// still has. Addresses stickyip already records are left as they are. A
// missing directory imports nothing. It returns how many records it added.
func ImportHostLocal(tx reservation.Txn, dir string, rangeSets []RangeSet, bootID string, now time.Time, log *slog.Logger) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: reading host-local data %s: %v", reservation.ErrIO, dir, err)
	}
	type file struct {
		ip  netip.Addr
		ent fs.DirEntry
	}
	var files []file
	for _, ent := range entries {
		ip, err := netip.ParseAddr(strings.ReplaceAll(ent.Name(), "_", ":"))
		if err != nil || !ent.Type().IsRegular() {
			continue // lock, last_reserved_ip.N, anything else
		}
		files = append(files, file{ip.Unmap(), ent})
	}
	// In address order, so the records come out sorted (ReadDir's name
	// order is not address order: 10.0.0.10 sorts before 10.0.0.2).
	slices.SortFunc(files, func(a, b file) int { return a.ip.Compare(b.ip) })
	rd, err := openDir(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: reading host-local data %s: %v", reservation.ErrIO, dir, err)
	}
	defer rd.close()
	var recs []*reservation.Record
	for _, f := range files {
		path := filepath.Join(dir, f.ent.Name())
		data, mtime, err := rd.read(f.ent.Name())
		if err != nil {
			return 0, fmt.Errorf("%w: reading %s: %v", reservation.ErrIO, path, err)
		}
		id, ifname, _ := strings.Cut(string(data), "\r\n")
		id, ifname = strings.TrimSpace(id), strings.TrimSpace(ifname)
		if id == "" {
			log.Warn("host-local import: file without container ID, skipped", "file", path)
			continue
		}
		cur, err := tx.Get(f.ip)
		if err != nil {
			return 0, err
		}
		if cur != nil {
			if cur.ContainerID != id {
				log.Warn("host-local import: address already recorded by stickyip, kept stickyip's record", "ip", f.ip, "hostLocalContainer", id, "stickyip", cur.Holder())
			}
			continue
		}
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
		recs = append(recs, &reservation.Record{IP: f.ip, RangeSet: set, State: reservation.Allocated, ContainerID: id, IfName: ifname,
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

// MarkImported records that host-local's data has been imported, so the plugin
// does not import it again on first use.
func MarkImported(tx reservation.Txn, now time.Time, n int) error {
	return tx.SetMeta(metaHostLocalImported, fmt.Sprintf("%s %d", now.UTC().Format(time.RFC3339), n))
}

// maxHostLocalFile bounds what is read of one host-local file: a container
// ID, CRLF and an interface name.
const maxHostLocalFile = 4096

// fileReader reads the small files of one directory with four system calls
// each (openat, fstat, read, close) into one buffer: os.ReadFile and
// DirEntry.Info take three more per file, and a /16 has 65,000 files.
type fileReader struct {
	dir int
	buf []byte
}

func openDir(dir string) (*fileReader, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &fileReader{dir: fd, buf: make([]byte, maxHostLocalFile)}, nil
}

func (r *fileReader) close() { _ = unix.Close(r.dir) }

// read returns the start of file name (valid until the next read) and its
// modification time.
func (r *fileReader) read(name string) ([]byte, time.Time, error) {
	fd, err := unix.Openat(r.dir, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	var mtime time.Time
	if err := unix.Fstat(fd, &st); err == nil {
		mtime = time.Unix(st.Mtim.Unix())
	}
	n := 0
	for n < len(r.buf) {
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, mtime, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return r.buf[:n], mtime, nil
}
