package cni

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

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
