package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/contract/placementv1"
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
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", UID: "node1-uid"}}
	pub := placement.New(api, placement.Options{Node: "node1", Store: rebuild.Published{Store: o}, Holds: o.holds,
		NodeObject: func() (*corev1.Node, bool) { return node, true }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	reads := func() (int64, int64) { return store.Uses(), ipam.ConfDirReads() }

	if _, err := store.Observe(); err != nil { // the reconcile pass
		t.Fatal(err)
	}
	uses, confReads := reads()
	pub.Pass(context.Background())
	if u, c := reads(); u != uses || c != confReads {
		t.Errorf("the publisher's pass after the reconcile pass read the store %d times and the directory %d times, want 0", u-uses, c-confReads)
	}
	if !api.publishes("db-0") {
		t.Errorf("the publisher's record holds %v, want the claim of db/db-0", api.identities())
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
	// What was read once is what was published: the pass after the ADD
	// wrote it (a view kept past its pass would publish the store as it
	// was before).
	if !api.publishes("db-1") {
		t.Errorf("after the ADD of db-1 the record holds %v, want db-1's claim written by the pass that read it", api.identities())
	}
}

// recordingAPI is an API server that takes every write of the record.
type recordingAPI struct{ spec placementv1.NodeRecordSpec }

func (a *recordingAPI) Get(context.Context) (*placementv1.NodeRecord, error) { return nil, nil }

func (a *recordingAPI) Publish(_ context.Context, spec placementv1.NodeRecordSpec) (*placementv1.NodeRecord, error) {
	a.spec = spec
	return &placementv1.NodeRecord{Spec: spec}, nil
}

// identities are the identities of the record as last written.
func (a *recordingAPI) identities() []string {
	var out []string
	for _, e := range a.spec.Entries {
		out = append(out, e.Identity)
	}
	return out
}

// publishes reports whether the record as last written holds id.
func (a *recordingAPI) publishes(id string) bool { return slices.Contains(a.identities(), id) }
