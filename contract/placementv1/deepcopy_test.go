package placementv1

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A copy shares nothing with its original: an informer's cache hands out
// the original, and a caller that changes its copy must not change it.
func TestDeepCopyShares(t *testing.T) {
	until := metav1.NewTime(time.Unix(100, 0))
	r := &NodeRecord{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "b"}},
		Spec: NodeRecordSpec{NodeUID: "u", Entries: []Entry{{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "p",
			Since: metav1.NewTime(time.Unix(1, 0)), Until: &until, Addresses: []string{"10.0.0.2"}}}},
		Status: NodeRecordStatus{NodeUID: "u", Claims: []Claim{{Namespace: "ns", Identity: "db-0", PodUID: "p",
			StatefulSet: &Retention{Name: "db", Verdict: Hold}}}},
	}
	c := r.DeepCopy()
	if !reflect.DeepEqual(r, c) {
		t.Fatalf("copy differs:\n%+v\n%+v", r, c)
	}
	c.Labels["a"] = "x"
	c.Spec.Entries[0].Addresses[0] = "10.0.0.9"
	c.Spec.Entries[0].Until.Time = time.Unix(200, 0)
	c.Status.Claims[0].StatefulSet.Verdict = Release
	if r.Labels["a"] != "b" || r.Spec.Entries[0].Addresses[0] != "10.0.0.2" || !r.Spec.Entries[0].Until.Equal(&until) ||
		r.Status.Claims[0].StatefulSet.Verdict != Hold {
		t.Fatalf("changing the copy changed the original: %+v", r)
	}
}
