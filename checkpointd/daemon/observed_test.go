package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
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

// The placement publisher reads the IPAM store as the reconcile pass does,
// through the store's Observe: a change is read once, by whichever asks
// first, and an unchanged store not at all (before, each publisher pass
// opened the store 7 times and read the CNI config directory once, beside
// the reconcile pass's reads).
func TestPublisherReadsEachChangeOnce(t *testing.T) {
	root := t.TempDir()
	dataDir, confDir := filepath.Join(root, "data"), filepath.Join(root, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`, dataDir)
	if err := os.WriteFile(filepath.Join(confDir, "10-cbr0.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	add := func(ip, name string) {
		t.Helper()
		err := boltstore.New(dataDir, time.Second).Update("cbr0", func(tx reservation.Txn) error {
			return tx.Put(&reservation.Record{IP: netip.MustParseAddr(ip), State: reservation.Allocated, ContainerID: "c-" + name, IfName: "eth0",
				Identity: reservation.Identity{Namespace: "db", Name: name, IfName: "eth0"}, PodName: name, Duration: 10 * time.Minute,
				AllocatedAt: time.Now().Add(-time.Minute)})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	add("10.244.1.7", "db-0")
	store := ipamstore.New(dataDir, time.Second, slog.New(slog.DiscardHandler)).WithCNIConfDir(confDir)
	api := &recordingAPI{}
	o := &observed{store: store}
	pub := placement.NewWithAPI(api, placement.Options{Node: "node1", Store: rebuild.Published{Store: o}, Holds: o.holds,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	reads := func() (int64, int64) { return store.Uses(), ipam.ConfDirReads() }

	if _, err := store.Observe(); err != nil { // the reconcile pass
		t.Fatal(err)
	}
	uses, confReads := reads()
	pub.Pass(context.Background())
	if u, c := reads(); u != uses || c != confReads {
		t.Errorf("the publisher's pass after the reconcile pass read the store %d times and the directory %d times, want 0", u-uses, c-confReads)
	}
	if api.writes == 0 {
		t.Error("the publisher wrote nothing, want the claim of db/db-0")
	}
	add("10.244.1.8", "db-1") // an ADD
	o.at = time.Time{}        // the next publisher pass
	uses, confReads = reads()
	pub.Pass(context.Background()) // the publisher asks first
	if _, err := store.Observe(); err != nil {
		t.Fatal(err)
	}
	if u, c := reads(); u != uses+1 || c != confReads+1 {
		t.Errorf("the ADD was read %d times from the store and %d from the directory by the publisher and the pass together, want once each", u-uses, c-confReads)
	}
	// The pass after the ADD saw it: a view of the store serves one pass,
	// never the next.
	if !strings.Contains(api.last, "db-1") {
		t.Errorf("the publisher's pass after the ADD wrote %q, want the claim of db/db-1", api.last)
	}
}

// recordingAPI is an API server that takes every write; last is the value
// of the last one.
type recordingAPI struct {
	writes int
	last   string
}

func (a *recordingAPI) NodeUID(context.Context) (types.UID, error) { return "node1-uid", nil }

func (a *recordingAPI) Get(context.Context, string, string) (*placement.Shard, error) {
	return &placement.Shard{Values: map[string]string{}}, nil
}

func (a *recordingAPI) Write(_ context.Context, _, _ string, c placement.Change) (*placement.Shard, error) {
	a.writes++
	a.last = c.Value
	return &placement.Shard{Exists: true, RV: fmt.Sprint(a.writes), Values: map[string]string{"node1": c.Value}}, nil
}

// Listed: the Node lists no shard yet.
func (a *recordingAPI) Listed(context.Context) (string, error) { return "", nil }

// List takes the Node's list of shards.
func (a *recordingAPI) List(context.Context, string) error { return nil }
