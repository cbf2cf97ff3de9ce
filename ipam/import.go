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
	"strings"
	"time"

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
	n := 0
	for _, ent := range entries {
		ip, err := netip.ParseAddr(strings.ReplaceAll(ent.Name(), "_", ":"))
		if err != nil || !ent.Type().IsRegular() {
			continue // lock, last_reserved_ip.N, anything else
		}
		ip = ip.Unmap()
		path := filepath.Join(dir, ent.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return n, fmt.Errorf("%w: reading %s: %v", reservation.ErrIO, path, err)
		}
		id, ifname, _ := strings.Cut(string(data), "\r\n")
		id, ifname = strings.TrimSpace(id), strings.TrimSpace(ifname)
		if id == "" {
			log.Warn("host-local import: file without container ID, skipped", "file", path)
			continue
		}
		cur, err := tx.Get(ip)
		if err != nil {
			return n, err
		}
		if cur != nil {
			if cur.ContainerID != id {
				log.Warn("host-local import: address already recorded by stickyip, kept stickyip's record", "ip", ip, "hostLocalContainer", id, "stickyip", cur.Holder())
			}
			continue
		}
		at := now
		if info, err := ent.Info(); err == nil {
			at = info.ModTime()
		}
		set := -1
		for i := range rangeSets {
			if rangeSets[i].Contains(net.IP(ip.AsSlice())) {
				set = i
				break
			}
		}
		rec := &reservation.Record{IP: ip, RangeSet: set, State: reservation.Allocated, ContainerID: id, IfName: ifname,
			BootID: bootID, AllocatedAt: at, Imported: true, ImportedFrom: path}
		if err := tx.Put(rec); err != nil {
			return n, err
		}
		n++
	}
	log.Info("imported host-local allocations", "dir", dir, "count", n)
	return n, nil
}

// MarkImported records that host-local's data has been imported, so the plugin
// does not import it again on first use.
func MarkImported(tx reservation.Txn, now time.Time, n int) error {
	return tx.SetMeta(metaHostLocalImported, fmt.Sprintf("%s %d", now.UTC().Format(time.RFC3339), n))
}
