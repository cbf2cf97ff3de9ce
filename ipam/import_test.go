package ipam

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/fake"
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
		_, err := ImportHostLocal(roomy{tx, false}, dir, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	})
	var more *reservation.NeedRoom
	if !errors.As(err, &more) || more.Bytes != bulkImport*importRoom {
		t.Fatalf("import of %d files without room: %v; want NeedRoom of %d bytes", bulkImport, err, bulkImport*importRoom)
	}
	var n int
	if err := st.Update("n", func(tx reservation.Txn) (err error) {
		n, err = ImportHostLocal(roomy{tx, true}, dir, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	}); err != nil || n != bulkImport {
		t.Fatalf("import with room: %d, %v; want %d", n, err, bulkImport)
	}
	small := hostLocalDir(t, bulkImport-1)
	if err := st.Update("m", func(tx reservation.Txn) (err error) {
		n, err = ImportHostLocal(roomy{tx, false}, small, nil, "b", time.Now(), slog.New(slog.DiscardHandler))
		return err
	}); err != nil || n != bulkImport-1 {
		t.Fatalf("import of %d files without room: %d, %v; want them imported", bulkImport-1, n, err)
	}
}
