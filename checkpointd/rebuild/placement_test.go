package rebuild

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

type ownReader []placement.Own

func (o ownReader) ReadOwn(context.Context, *corev1.Node) ([]placement.Own, error) { return o, nil }

func TestPlacementIndex(t *testing.T) {
	until := time.Date(2026, 11, 27, 12, 30, 0, 0, time.UTC)
	got, err := PlacementIndex{Reader: ownReader{
		{Namespace: "apps", Line: entry.Line{Identity: "identity:cache", Pod: "web-x1", Until: until, IPs: []string{"10.9.0.5", "fd00::5"}}},
		{Namespace: "apps", Line: entry.Line{Identity: "db-0", Pod: "db-0", IPs: []string{"10.9.0.6", "not-an-ip"}}},
	}}.ReadOwn(context.Background(), nil)
	if err != nil || len(got) != 2 {
		t.Fatalf("ReadOwn = %+v, %v", got, err)
	}
	if e := got[0]; e.Namespace != "apps" || e.Identity != "identity:cache" || e.Pod != "web-x1" || !e.Until.Equal(until) ||
		!slices.Equal(e.IPs, []netip.Addr{netip.MustParseAddr("10.9.0.5"), netip.MustParseAddr("fd00::5")}) {
		t.Fatalf("entry %+v", e)
	}
	if e := got[1]; !e.Until.IsZero() || !slices.Equal(e.IPs, []netip.Addr{netip.MustParseAddr("10.9.0.6")}) {
		t.Fatalf("running entry %+v", e)
	}
}
