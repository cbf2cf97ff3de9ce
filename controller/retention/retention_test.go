package retention

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

const (
	R, D             = contract.PolicyRetain, contract.PolicyDelete
	SS, PodOwner, No = placementv1.OwnerStatefulSet, placementv1.OwnerPod, ""
	Hold, Release    = placementv1.Hold, placementv1.Release
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func set(whenScaled, whenDeleted string, start, replicas int32, mut ...func(*facts.StatefulSet)) *facts.StatefulSet {
	s := &facts.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "s1", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Replicas: replicas, Start: start, WhenScaled: whenScaled, WhenDeleted: whenDeleted}
	for _, m := range mut {
		m(s)
	}
	return s
}

func deleting(orphan bool) func(*facts.StatefulSet) {
	return func(s *facts.StatefulSet) {
		now := metav1.NewTime(t0)
		s.DeletionTimestamp = &now
		if orphan {
			s.Finalizers = []string{metav1.FinalizerOrphanDependents}
		}
	}
}

func recreated(s *facts.StatefulSet) {
	s.UID, s.CreationTimestamp = "s2", metav1.NewTime(t0)
}

// pod returns db-<ordinal> controlled by StatefulSet db of uid (none: no controller).
func pod(name string, uid types.UID, mut ...func(*facts.Pod)) *facts.Pod {
	p := &facts.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "p-" + types.UID(name), CreationTimestamp: metav1.NewTime(t0.Add(-30 * time.Minute))}, NodeName: "n1"}
	if uid != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: uid}}
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func TestOwner(t *testing.T) {
	tests := []struct {
		whenScaled, whenDeleted string
		start, replicas         int32
		ordinal                 int
		owner                   string
	}{
		{R, R, 0, 3, 1, No}, {R, R, 0, 1, 2, No},
		{R, D, 0, 3, 1, SS}, {R, D, 0, 1, 2, SS},
		{D, R, 0, 3, 1, No}, {D, R, 0, 1, 2, PodOwner},
		{D, D, 0, 3, 1, SS}, {D, D, 0, 1, 2, PodOwner},
		// ordinals.start: [5, 7)
		{D, D, 5, 2, 4, PodOwner}, {D, D, 5, 2, 5, SS}, {D, D, 5, 2, 6, SS}, {D, D, 5, 2, 7, PodOwner},
		// scaled to zero
		{D, R, 0, 0, 0, PodOwner}, {R, D, 0, 0, 0, SS}, {D, D, 3, 0, 3, PodOwner},
	}
	for _, tt := range tests {
		s := set(tt.whenScaled, tt.whenDeleted, tt.start, tt.replicas)
		if got := Owner(s, tt.ordinal); got != tt.owner {
			t.Errorf("%s/%s, ordinals [%d, %d), ordinal %d: owner %q, want %q", tt.whenScaled, tt.whenDeleted,
				tt.start, tt.start+tt.replicas, tt.ordinal, got, tt.owner)
		}
	}
}

func prev(owner string, verdict string) *placementv1.Retention {
	return &placementv1.Retention{Name: "db", UID: "s1", Owner: owner, Verdict: verdict, Why: "before"}
}

func TestDecide(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	tests := []struct {
		name    string
		in      Input
		want    *placementv1.Retention // Why checked for a part only
		whyPart string
	}{
		// While the pod exists: the owner follows the StatefulSet's current spec.
		{name: "runs, Retain/Retain", in: Input{Pod: pod("db-1", "s1"), Set: set(R, R, 0, 3)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}, whyPart: "nothing deletes"},
		{name: "runs, Retain/Delete", in: Input{Pod: pod("db-1", "s1"), Set: set(R, D, 0, 3)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Hold}, whyPart: "kept while StatefulSet db (uid s1) exists"},
		{name: "runs, condemned, Delete/Retain", in: Input{Pod: pod("db-1", "s1"), Set: set(D, R, 0, 1)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: PodOwner, Verdict: Hold}, whyPart: "released once the pod is gone"},
		{name: "runs, policy edited since", in: Input{Pod: pod("db-1", "s1"), Set: set(D, D, 0, 3), Prev: prev(No, Hold)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Hold}},
		{name: "runs, StatefulSet deleting, owner frozen", in: Input{Pod: pod("db-1", "s1"), Set: set(D, D, 0, 0, deleting(false)), Prev: prev(SS, Hold)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release}, whyPart: "is being deleted"},
		{name: "runs, StatefulSet deleting, first seen", in: Input{Pod: pod("db-1", "s1"), Set: set(R, R, 0, 3, deleting(false))},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}},
		{name: "runs, orphaned (no controller now)", in: Input{Pod: pod("db-1", ""), Prev: prev(SS, Hold), Deletion: Orphaned},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}, whyPart: "--cascade=orphan"},
		{name: "adopted by a new StatefulSet", in: Input{Pod: pod("db-1", "s2"), Set: set(R, D, 0, 3, recreated), Prev: prev(No, Hold)},
			want: &placementv1.Retention{Name: "db", UID: "s2", Owner: SS, Verdict: Hold}},
		{name: "runs, StatefulSet never seen", in: Input{Pod: pod("db-1", "s1")}},
		{name: "fixed", in: Input{Pod: pod("db-1", "s1", func(p *facts.Pod) { p.Fixed = true }), Set: set(R, D, 0, 3)}},
		{name: "not a StatefulSet pod", in: Input{Pod: pod("db-1", "s1", func(p *facts.Pod) { p.OwnerReferences[0].Kind = "ReplicaSet" }), Set: set(R, D, 0, 3)}},
		{name: "a name the StatefulSet does not give", in: Input{Pod: pod("web-1", "s1"), Set: set(R, D, 0, 3)}},
		// Once the pod is gone: the owner is frozen.
		{name: "gone, owner pod", in: Input{Gone: true, Prev: prev(PodOwner, Hold), Set: set(D, R, 0, 1)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: PodOwner, Verdict: Release}, whyPart: "went with it"},
		{name: "gone, owner StatefulSet, it exists", in: Input{Gone: true, Prev: prev(SS, Hold), Set: set(R, D, 0, 3)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Hold}},
		{name: "gone, owner none, policy edited to Delete after the scale-down", in: Input{Gone: true, Prev: prev(No, Hold), Set: set(D, D, 0, 1)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}},
		{name: "gone, owner StatefulSet, scaled down later (whenScaled: Delete)", in: Input{Gone: true, Prev: prev(SS, Hold), Set: set(D, D, 0, 0)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Hold}},
		{name: "gone, StatefulSet being deleted", in: Input{Gone: true, Prev: prev(SS, Hold), Set: set(R, D, 0, 3, deleting(false))},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release}},
		{name: "gone, StatefulSet being orphan-deleted", in: Input{Gone: true, Prev: prev(SS, Hold), Set: set(R, D, 0, 3, deleting(true))},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}, whyPart: "--cascade=orphan"},
		{name: "gone, StatefulSet deleted, background seen", in: Input{Gone: true, Prev: prev(SS, Hold), Deletion: Cascaded, Orphans: yes},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release}, whyPart: "was deleted (whenDeleted: Delete)"},
		{name: "gone, StatefulSet deleted, orphan seen", in: Input{Gone: true, Prev: prev(SS, Hold), Deletion: Orphaned, Orphans: no},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}},
		{name: "gone, StatefulSet deleted unseen, orphans", in: Input{Gone: true, Prev: prev(SS, Hold), Orphans: yes},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}},
		{name: "gone, StatefulSet deleted unseen, no orphans", in: Input{Gone: true, Prev: prev(SS, Hold), Orphans: no},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release}},
		{name: "gone, StatefulSet re-created within a pass", in: Input{Gone: true, Prev: prev(SS, Hold), Set: set(R, D, 0, 3, recreated), Deletion: Cascaded},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release}},
		{name: "gone, orphaned before (owner none)", in: Input{Gone: true, Prev: prev(No, Hold), Set: set(R, D, 0, 3, recreated)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: No, Verdict: Hold}},
		{name: "gone, released before: final", in: Input{Gone: true, Prev: prev(SS, Release), Set: set(R, R, 0, 3), Orphans: yes},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: SS, Verdict: Release, Why: "before"}},
		{name: "gone, last seen as deleted, not judged before", in: Input{Gone: true, Pod: pod("db-2", "s1"), Set: set(D, R, 0, 2)},
			want: &placementv1.Retention{Name: "db", UID: "s1", Owner: PodOwner, Verdict: Release}},
		{name: "gone, never seen", in: Input{Gone: true, Set: set(R, D, 0, 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.PodName = "db-1"
			got := Decide(in)
			switch {
			case tt.want == nil && got == nil:
				return
			case tt.want == nil || got == nil:
				t.Fatalf("retention %+v, want %+v", got, tt.want)
			}
			if got.Name != tt.want.Name || got.UID != tt.want.UID || got.Owner != tt.want.Owner || got.Verdict != tt.want.Verdict {
				t.Fatalf("retention %+v, want %+v", got, tt.want)
			}
			if tt.want.Why != "" && got.Why != tt.want.Why || !strings.Contains(got.Why, tt.whyPart) || got.Why == "" || len(got.Why) > maxWhy {
				t.Errorf("why %q, want one containing %q", got.Why, tt.whyPart)
			}
		})
	}
}

func TestOrphans(t *testing.T) {
	s2 := set(R, D, 0, 3, recreated)
	older := func(p *facts.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute)) }
	newer := func(p *facts.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute)) }
	gone := func(p *facts.Pod) { now := metav1.NewTime(t0); p.DeletionTimestamp = &now }
	tests := []struct {
		name    string
		pods    []*facts.Pod
		current *facts.StatefulSet
		want    bool
	}{
		{"no pods", nil, nil, false},
		{"a pod without a controller", []*facts.Pod{pod("db-0", "")}, nil, true},
		{"a pod without a controller, being deleted", []*facts.Pod{pod("db-0", "", gone)}, nil, false},
		{"a pod still of the deleted StatefulSet", []*facts.Pod{pod("db-0", "s1")}, nil, false},
		{"another name", []*facts.Pod{pod("dbx-0", "")}, nil, false},
		{"adopted by the new StatefulSet", []*facts.Pod{pod("db-0", "s2", older)}, s2, true},
		{"made by the new StatefulSet", []*facts.Pod{pod("db-0", "s2", newer)}, s2, false},
		{"controlled by a StatefulSet not cached", []*facts.Pod{pod("db-0", "s3", older)}, s2, false},
	}
	for _, tt := range tests {
		if got := Orphans("db", "s1", tt.pods, tt.current); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A Why is cut to the schema's 512 characters (a longer one is refused by
// the API server, and the whole status with it), and only a longer one:
// one of exactly 512 is written whole.
func TestWhyClippedToTheSchema(t *testing.T) {
	whole := strings.Repeat("w", 512)
	if got := clip(whole); got != whole {
		t.Errorf("a why of 512 characters clipped to %d: %q", len(got), got[len(got)-5:])
	}
	got := clip(whole + "x")
	if len(got) != 512 || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, whole[:509]) {
		t.Errorf("a why of 513 characters became %d: …%q", len(got), got[max(0, len(got)-5):])
	}
}
