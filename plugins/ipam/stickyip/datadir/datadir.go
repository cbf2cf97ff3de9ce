// Package datadir opens a data directory's store as the stickyip binary
// does, both as the CNI plugin (package cni) and as the operator tool
// (package admin), so that both see a lost store the same way.
package datadir

import (
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// Open returns the store in dataDir as the plugin and the operator tool
// open it. A data directory with neither a database nor a creation mark is
// new unless the runtime's CNI result cache (libcni's default, where
// containerd and CRI-O keep it) shows a sandbox that got its address from
// it: then it was removed whole, and is lost. lockTimeout 0: the store's
// default.
func Open(dataDir string, lockTimeout time.Duration) *boltstore.Store {
	return boltstore.New(dataDir, lockTimeout).WithLostWitness(ipam.CacheWitness(contract.DefaultCNIResultsDir, dataDir))
}
