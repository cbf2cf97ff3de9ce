package ipam

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/fake"
	"github.com/stickyip/stickyip/test/harness/strict"
)

// roomy is a Txn with or without room for a bulk load.
type roomy struct {
	reservation.Txn
	room bool
}

func (r roomy) HasRoom(int) bool { return r.room }

// A large import asks the store for room before it reads a file (the bbolt
// store then maps the file once, big enough), and imports every file once
// it has it; a small one never asks.
func TestImportAsksForRoom(t *testing.T) {
	dir := hostLocalDir(t, bulkImport)
	st := fake.New()
	err := st.Update("n", func(tx reservation.Txn) error {
		_, err := (&HostLocal{Dir: dir}).Import(roomy{tx, false}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	})
	var more *reservation.NeedRoom
	if !errors.As(err, &more) || more.Bytes != bulkImport*importRoom {
		t.Fatalf("import of %d files without room: %v; want NeedRoom of %d bytes", bulkImport, err, bulkImport*importRoom)
	}
	var n int
	if err := st.Update("n", func(tx reservation.Txn) (err error) {
		n, err = (&HostLocal{Dir: dir}).Import(roomy{tx, true}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	}); err != nil || n != bulkImport {
		t.Fatalf("import with room: %d, %v; want %d", n, err, bulkImport)
	}
	checkImported(t, st, "n", dir, bulkImport)
	small := hostLocalDir(t, bulkImport-1)
	if err := st.Update("m", func(tx reservation.Txn) (err error) {
		n, err = (&HostLocal{Dir: small}).Import(roomy{tx, false}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	}); err != nil || n != bulkImport-1 {
		t.Fatalf("import of %d files without room: %d, %v; want them imported", bulkImport-1, n, err)
	}
}

// checkImported fails unless network holds want records, each the
// allocation of its host-local file in dir (container ID, interface name,
// the file's modification time), as a DEL of that container would find it.
func checkImported(t *testing.T, st *fake.Store, network, dir string, want int) {
	t.Helper()
	got := 0
	err := st.View(network, func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error {
			got++
			path := filepath.Join(dir, r.IP.String())
			body, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			id, ifname, _ := strings.Cut(string(body), "\r\n")
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			if r.ContainerID != id || r.IfName != ifname || r.ImportedFrom != path || !r.AllocatedAt.Equal(fi.ModTime()) || r.State != reservation.Allocated {
				return fmt.Errorf("%s imported as %+v; the file says %q/%q, modified %s", r.IP, r, id, ifname, fi.ModTime())
			}
			if got == 1 { // the fake store's index is a scan: one
				held, err := tx.ByContainer(id, ifname)
				if err != nil || len(held) != 1 || held[0].IP != r.IP {
					return fmt.Errorf("container %s holds %v (%v); want %s", id, held, err, r.IP)
				}
			}
			return nil
		})
	})
	if err != nil || got != want {
		t.Fatalf("%d records (%v); want %d, each its file's", got, err, want)
	}
}

// The transaction that runs again with room reads the listing the first one
// made, and what it imports is still each file's allocation.
func TestImportListingKeptForTheRetry(t *testing.T) {
	dir := hostLocalDir(t, bulkImport)
	st := fake.New()
	h := &HostLocal{Dir: dir}
	for _, room := range []bool{false, true} {
		var n int
		err := st.Update("n", func(tx reservation.Txn) (err error) {
			n, err = h.Import(roomy{tx, room}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
			return err
		})
		var more *reservation.NeedRoom
		if !room && !errors.As(err, &more) || room && (err != nil || n != bulkImport) {
			t.Fatalf("room %v: %d, %v", room, n, err)
		}
		if !room { // the listing is kept: a name that goes away is noticed when its file is read
			if err := os.Remove(filepath.Join(dir, "10.100.0.2")); err != nil {
				t.Fatal(err)
			}
			err := st.Update("n", func(tx reservation.Txn) error {
				_, err := h.Import(roomy{tx, true}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
				return err
			})
			if !errors.Is(err, reservation.ErrIO) || !strings.Contains(err.Error(), "10.100.0.2") {
				t.Fatalf("file removed after the listing: %v; want an I/O error naming it", err)
			}
			if err := os.WriteFile(filepath.Join(dir, "10.100.0.2"), []byte("back\r\neth0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkImported(t, st, "n", dir, bulkImport)
}

// A FIFO put in place of an allocation file after the listing is skipped as
// a file without a container ID, as an empty file is; it does not hang the
// call (the reads are raw system calls, which a blocking open of a FIFO
// would never return from).
func TestImportFIFODoesNotHang(t *testing.T) {
	dir := hostLocalDir(t, 8)
	h := &HostLocal{Dir: dir}
	fifo := filepath.Join(dir, "10.100.0.5")
	st := fake.New()
	importing := func() chan error {
		done := make(chan error, 1)
		go func() {
			done <- st.Update("n", func(tx reservation.Txn) error {
				_, err := h.Import(roomy{tx, false}, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
				return err
			})
		}()
		return done
	}
	if err := <-importing(); err != nil { // lists the file as a file
		t.Fatal(err)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	st = fake.New()
	select {
	case err := <-importing():
		if err != nil {
			t.Fatalf("import with a FIFO for %s: %v", fifo, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("import with a FIFO for %s (listed as a file) still running after 20 s", fifo)
	}
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	checkImported(t, st, "n", dir, 7)
}

// The operator tool run by a user who does not own host-local's files
// cannot open them without updating their access time (O_NOATIME is the
// owner's): it reads them as before.
func TestImportFilesOfAnotherOwner(t *testing.T) {
	if os.Getenv("STICKYIP_IMPORT_AS_NOBODY") != "" {
		dir := os.Getenv("STICKYIP_IMPORT_AS_NOBODY")
		st := fake.New()
		if err := st.Update("n", func(tx reservation.Txn) error {
			_, err := (&HostLocal{Dir: dir}).Import(tx, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		checkImported(t, st, "n", dir, 8)
		return
	}
	if os.Geteuid() != 0 {
		strict.Missing(t, "needs root: the files belong to root, the import runs as nobody")
	}
	dir := hostLocalDir(t, 8)
	for _, p := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0]) // where go test builds it, nobody may not run it
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ipam.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^TestImportFilesOfAnotherOwner$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STICKYIP_IMPORT_AS_NOBODY="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("import as nobody of root's files: %v\n%s", err, out)
	}
}

// An address host-local lists that stickyip already records keeps
// stickyip's record; when another container holds it there, the log says
// so, naming both, and when the same container does, it says nothing.
func TestImportKeepsStickyipsRecord(t *testing.T) {
	dir := hostLocalDir(t, 2) // 10.100.0.2 and .3
	hostLocal := map[string]string{}
	for _, ip := range []string{"10.100.0.2", "10.100.0.3"} {
		b, err := os.ReadFile(filepath.Join(dir, ip))
		if err != nil {
			t.Fatal(err)
		}
		hostLocal[ip], _, _ = strings.Cut(string(b), "\r\n")
	}
	st := fake.New()
	if err := st.Update("n", func(tx reservation.Txn) error {
		for ip, cid := range map[string]string{"10.100.0.2": "stickyip-pod", "10.100.0.3": hostLocal["10.100.0.3"]} {
			if err := tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: cid, IfName: "eth0"}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := st.Update("n", func(tx reservation.Txn) error {
		_, err := (&HostLocal{Dir: dir}).Import(tx, nil, "b", time.Now(), slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = st.View("n", func(tx reservation.Txn) error {
		if r, _ := tx.Get(netip.MustParseAddr("10.100.0.2")); r == nil || r.ContainerID != "stickyip-pod" || r.Imported {
			t.Errorf("10.100.0.2: %+v, want stickyip's record kept", r)
		}
		return nil
	})
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "ip=10.100.0.2") || !strings.Contains(lines[0], "hostLocalContainer="+hostLocal["10.100.0.2"]) ||
		!strings.Contains(lines[0], "kept stickyip's record") {
		t.Errorf("warnings:\n%s\nwant one, on 10.100.0.2, naming host-local's container", log.String())
	}
}

// Until host-local's allocations are imported, housekeeping is due (a DEL,
// the node's first call after the switch, runs it); once they are, it is
// not.
func TestHousekeepingDueUntilImported(t *testing.T) {
	w := newWorld(t, `{"type":"stickyip","subnet":"10.100.0.0/24"}`)
	w.eng.hostLocalDir = hostLocalDir(t, 2)
	due := func() bool {
		t.Helper()
		var due bool
		if err := w.store.View("net1", func(tx reservation.Txn) (err error) { due, err = w.eng.housekeepingDue(tx, w.now); return err }); err != nil {
			t.Fatal(err)
		}
		return due
	}
	if !due() {
		t.Fatal("housekeeping not due before host-local's allocations are imported")
	}
	w.del("no-such-container")
	if w.stateOf("10.100.0.2") != reservation.Allocated {
		t.Fatalf("after the first DEL: %+v, want host-local's allocations imported", w.records())
	}
	if due() {
		t.Fatal("housekeeping still due after the import")
	}
}
