package ipam

import (
	"fmt"
	"path/filepath"

	"github.com/stickyip/stickyip/contract"
)

// CacheWitness returns the test a store (boltstore.Store.WithLostWitness)
// runs when its data directory has neither a database nor a creation mark:
// a new node, or a directory removed whole with its mark. The runtime's CNI
// result cache (resultsDir) tells them apart: libcni keeps a file for every
// ADD until its DEL, with the network config the ADD ran with, so a file
// whose config keeps its records in dataDir through stickyip is a sandbox
// that got its address from the store now gone. The test returns that
// file's description (the store was lost: no address may be handed out
// until it is rebuilt), or "" when no such file exists. A cache directory
// that does not exist holds none; one that cannot be listed is an error
// (the answer is unknown, so nothing is handed out either). Files that do
// not parse name no data directory and are passed over: libcni writes the
// config of every file it writes, and another program's file is not
// evidence.
func CacheWitness(resultsDir, dataDir string) func() (string, error) {
	return func() (string, error) {
		entries, _, err := contract.ReadCNICache(resultsDir)
		if err != nil {
			return "", err
		}
		want := filepath.Clean(dataDir)
		for _, e := range entries {
			n, err := ParseNetwork(e.Config)
			if err != nil {
				continue
			}
			s, ok, err := n.Store()
			if err != nil || !ok || s.DataDir != want {
				continue
			}
			return fmt.Sprintf("the runtime's CNI result cache holds %s: sandbox %s got %v on network %s through stickyip with this data directory and was not deleted since",
				filepath.Join(resultsDir, e.Network+"-"+e.ContainerID+"-"+e.IfName), e.ContainerID, e.IPs, e.Network), nil
		}
		return "", nil
	}
}
