// Package ipam is stickyip's allocation engine and configuration: it decides
// which addresses a sandbox gets, turns a deleted pod's addresses into
// reservations, and keeps the store free of expired reservations and of
// allocations whose sandbox died without a DEL. It works on a
// reservation.Txn, so it is tested without disk (reservation/fake) and runs on
// bbolt in the plugin (reservation/boltstore).
package ipam

import "errors"

// Errors the engine and the config parser return; the plugin maps them to CNI
// error codes (the table: docs/troubleshooting.md).
var (
	// ErrInvalidConfig: the network configuration or an annotation is wrong.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrInvalidArgs: CNI_ARGS or another CNI environment value is wrong.
	ErrInvalidArgs = errors.New("invalid CNI arguments")
	// ErrPoolExhausted: a range set has no address to hand out.
	ErrPoolExhausted = errors.New("no free IP address")
	// ErrInvalidRequest: the requested addresses cannot be granted to
	// anyone: outside every range, a gateway, network or broadcast address,
	// or two in one range set.
	ErrInvalidRequest = errors.New("invalid IP request")
	// ErrIPUnavailable: a requested address is held, reserved, or cooling
	// for someone else.
	ErrIPUnavailable = errors.New("requested IP address is not available")
	// ErrHolderAlive: the identity's address is held by another sandbox that
	// may still be running; the runtime should try again later.
	ErrHolderAlive = errors.New("the pod's reserved IP is still held by another sandbox")
	// ErrRangeRetired: the network's range lies in a pod CIDR the node no
	// longer has (its Node was registered again with another one) and its
	// configuration has not caught up yet; the runtime should try again later.
	ErrRangeRetired = errors.New("the network's range is no longer the node's")
	// ErrRebuildWait: the store was rebuilt without the reservations only
	// the placement index knows (the API server was away), so no address
	// that is not already the pod's is handed out until they are back (or
	// could no longer be live); the runtime should try again later.
	ErrRebuildWait = errors.New("the rebuilt store waits for the reservations of the placement index")
	// ErrNoAllocation: CHECK found no allocation for the container.
	ErrNoAllocation = errors.New("no IP allocation recorded for this container")
	// ErrNoNetworkConfig: a network has records in a store but no stickyip
	// config in the CNI config dir that keeps them there, so no engine with
	// its rules can be built (its records are left as they are).
	ErrNoNetworkConfig = errors.New("no stickyip config for the network")
)
