package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// The placement publisher publishes what the reconcile pass read of the
// IPAM store, as the daemon wires it: its pass opens neither the store nor
// the CNI config directory (before, each of its passes opened the store 7
// times and read the directory once, beside the reconcile pass's reads).
func TestPublisherReadsWhatThePassRead(t *testing.T) {
	root := t.TempDir()
	dataDir, confDir := filepath.Join(root, "data"), filepath.Join(root, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`, dataDir)
	if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	err := boltstore.New(dataDir, time.Second).Update("cbr0", func(tx reservation.Txn) error {
		return tx.Put(&reservation.Record{IP: netip.MustParseAddr("10.244.1.7"), State: reservation.Allocated, ContainerID: "c1", IfName: "eth0",
			Identity: reservation.Identity{Namespace: "db", Name: "db-0", IfName: "eth0"}, PodName: "db-0", Duration: 10 * time.Minute,
			AllocatedAt: time.Now().Add(-time.Minute)})
	})
	if err != nil {
		t.Fatal(err)
	}
	store := ipamstore.New(dataDir, time.Second, slog.New(slog.DiscardHandler)).WithCNIConfDir(confDir)
	latest := &passView{kick: make(chan struct{}, 1)}
	api := &recordingAPI{}
	pub := placement.NewWithAPI(api, placement.Options{Node: "node1", Store: rebuild.Published{Store: latest}, Holds: latest.holds,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

	pub.Pass(context.Background()) // nothing read yet: nothing published
	if api.writes != 0 {
		t.Fatalf("published %d writes before any pass read the store", api.writes)
	}
	v, err := store.Observe() // the reconcile pass
	if err != nil {
		t.Fatal(err)
	}
	latest.set(v)
	uses, confReads := store.Uses(), ipam.ConfDirReads()
	pub.Pass(context.Background())
	if got := store.Uses() - uses; got != 0 {
		t.Errorf("the publisher's pass opened the store %d times, want 0", got)
	}
	if got := ipam.ConfDirReads() - confReads; got != 0 {
		t.Errorf("the publisher's pass read the CNI config directory %d times, want 0", got)
	}
	if api.writes == 0 {
		t.Error("the publisher wrote nothing, want the claim of db/db-0")
	}
	select {
	case <-latest.kick:
	default:
		t.Error("the pass did not start the publisher's")
	}
}

// recordingAPI is an API server that takes every write.
type recordingAPI struct{ writes int }

func (a *recordingAPI) NodeUID(context.Context) (types.UID, error) { return "node1-uid", nil }

func (a *recordingAPI) Get(context.Context, string, string) (*placement.Shard, error) {
	return &placement.Shard{Values: map[string]string{}}, nil
}

func (a *recordingAPI) Write(_ context.Context, _, _ string, c placement.Change) (*placement.Shard, error) {
	a.writes++
	return &placement.Shard{Exists: true, RV: fmt.Sprint(a.writes), Values: map[string]string{"node1": c.Value}}, nil
}
