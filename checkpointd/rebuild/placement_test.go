package rebuild

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
)

type recordReader struct{ r *placementv1.NodeRecord }

func (x recordReader) Get(context.Context) (*placementv1.NodeRecord, error) { return x.r, nil }

// A re-imaged node takes back what its own record says, with the
// controller's account of each entry: written under its Node's UID or not,
// claimed later by another node, kept by which StatefulSet.
func TestRecordIndex(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 11, 27, 12, 30, 0, 0, time.UTC))
	rec := &placementv1.NodeRecord{
		Spec: placementv1.NodeRecordSpec{NodeUID: "u1", Entries: []placementv1.Entry{
			{Namespace: "apps", Identity: "identity:cache", Pod: "web-x1", PodUID: "p1", Until: &until, Addresses: []string{"10.9.0.5", "fd00::5"}},
			{Namespace: "apps", Identity: "db-0", Pod: "db-0", PodUID: "p2", Addresses: []string{"10.9.0.6", "not-an-ip"}},
			{Namespace: "apps", Identity: "db-1", Pod: "db-1", PodUID: "p3", Held: true, Addresses: []string{"10.9.0.7"}},
		}},
		Status: placementv1.NodeRecordStatus{NodeUID: "u1", Claims: []placementv1.Claim{
			{Namespace: "apps", Identity: "identity:cache", PodUID: "p1", Indexed: false},
			{Namespace: "apps", Identity: "db-0", PodUID: "p2", Indexed: true},
			{Namespace: "apps", Identity: "db-1", PodUID: "p3", Indexed: true,
				StatefulSet: &placementv1.Retention{Name: "db", UID: "s1", Verdict: placementv1.Hold, Why: "kept"}},
		}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}}
	got, err := RecordIndex{Reader: recordReader{rec}}.ReadOwn(context.Background(), node)
	if err != nil || len(got) != 3 {
		t.Fatalf("ReadOwn = %+v, %v", got, err)
	}
	if e := got[0]; e.Namespace != "apps" || e.Identity != "identity:cache" || e.Pod != "web-x1" || !e.Until.Equal(until.Time) ||
		e.LaterBy == "" || e.Disowned || !slices.Equal(e.IPs, []netip.Addr{netip.MustParseAddr("10.9.0.5"), netip.MustParseAddr("fd00::5")}) {
		t.Errorf("a reservation another node claimed later: %+v", e)
	}
	if e := got[1]; !e.Until.IsZero() || e.Held || e.LaterBy != "" || !slices.Equal(e.IPs, []netip.Addr{netip.MustParseAddr("10.9.0.6")}) {
		t.Errorf("a running pod's entry: %+v", e)
	}
	if got[0].PodUID != "p1" || got[1].PodUID != "p2" || got[2].PodUID != "p3" {
		t.Errorf("the entries' pod UIDs: %q %q %q, want p1 p2 p3 (the controller's verdicts name the pod by it)", got[0].PodUID, got[1].PodUID, got[2].PodUID)
	}
	if e := got[2]; !e.Held || e.StatefulSet == nil || e.StatefulSet.Name != "db" || e.StatefulSet.UID != "s1" {
		t.Errorf("a held entry: %+v, want held following StatefulSet db (s1)", e)
	}

	// A record written under an earlier Node of the name counts for nothing.
	got, err = RecordIndex{Reader: recordReader{rec}}.ReadOwn(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{UID: "u2"}})
	if err != nil || len(got) != 3 || !got[0].Disowned || !got[1].Disowned {
		t.Errorf("under another Node UID: %+v, %v, want every entry disowned", got, err)
	}
	// No record: nothing to take back.
	if got, err := (RecordIndex{Reader: recordReader{}}).ReadOwn(context.Background(), node); err != nil || len(got) != 0 {
		t.Errorf("no record: %+v, %v", got, err)
	}
}
