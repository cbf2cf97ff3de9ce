package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
)

func TestToCNIErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code uint
	}{
		{ipam.ErrInvalidConfig, types.ErrInvalidNetworkConfig},
		{ipam.ErrInvalidArgs, types.ErrInvalidEnvironmentVariables},
		{ipam.ErrHolderAlive, types.ErrTryAgainLater},
		{ipam.ErrRangeRetired, types.ErrTryAgainLater},
		{ipam.ErrRebuildWait, types.ErrTryAgainLater},
		{reservation.ErrLocked, types.ErrTryAgainLater},
		{reservation.ErrAwaiting, types.ErrTryAgainLater},
		{ipam.ErrPoolExhausted, CodePoolExhausted},
		{ipam.ErrIPUnavailable, CodeIPUnavailable},
		{ipam.ErrInvalidRequest, types.ErrInvalidNetworkConfig},
		{ipam.ErrNoAllocation, types.ErrUnknownContainer},
		{reservation.ErrCorrupt, CodeStoreUnreadable},
		{reservation.ErrFutureSchema, CodeStoreUnreadable},
		{reservation.ErrLost, CodeStoreUnreadable},
		{reservation.ErrIO, types.ErrIOFailure},
		{errors.New("something else"), types.ErrInternal},
	} {
		wrapped := fmt.Errorf("context: %w", tc.err)
		got := ToCNIError(wrapped)
		if got.Code != tc.code || got.Msg != "stickyip: "+wrapped.Error() {
			t.Errorf("%v: code %d msg %q, want code %d", tc.err, got.Code, got.Msg, tc.code)
		}
	}
	// An error that already is a CNI error passes through unchanged.
	pre := types.NewError(50, "x", "")
	if ToCNIError(fmt.Errorf("w: %w", pre)) != pre {
		t.Error("a wrapped *types.Error was not passed through")
	}
}

// TestOpenAppend: the log file opens as os.OpenFile(O_WRONLY|O_APPEND|
// O_CREATE, 0o600) opens it (created 0600, appended to, close-on-exec, the
// same error), with a blocking descriptor the runtime's poller never takes.
func TestOpenAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := openAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("two\n"); err != nil {
		t.Fatal(err)
	}
	fd := f.Fd()
	cloexec, _ := unix.FcntlInt(fd, unix.F_GETFD, 0)
	status, _ := unix.FcntlInt(fd, unix.F_GETFL, 0)
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" || f.Name() != path || cloexec&unix.FD_CLOEXEC == 0 || status&unix.O_NONBLOCK != 0 || status&unix.O_APPEND == 0 {
		t.Fatalf("file %q name %q, descriptor flags %#x, status flags %#x", b, f.Name(), cloexec, status)
	}

	created := filepath.Join(t.TempDir(), "new")
	f, err = openAppend(created)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created %v (%v), want mode 0600", fi.Mode(), err)
	}

	missing := filepath.Join(t.TempDir(), "no", "log")
	_, err = openAppend(missing)
	_, want := os.OpenFile(missing, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	var perr *fs.PathError
	if !errors.As(err, &perr) || err.Error() != want.Error() {
		t.Fatalf("error %#v, want os.OpenFile's %#v", err, want)
	}
}
