//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"
)

// The random adversary's writes are a function of its seed alone (issue
// 47: resourceVersions, UIDs, clocks and the running publishers made a
// printed seed replay another run): the same seed plans the same writes,
// whatever the cluster, another seed others. No cluster needed.
func TestAdversaryPlanRepeats(t *testing.T) {
	ids := []string{"db0-0", "db0-1", "db1-0", "db1-1"}
	a, b := advPlan(42, 500, ids), advPlan(42, 500, slices.Clone(ids))
	if !slices.Equal(a, b) {
		t.Fatal("seed 42 planned two different runs")
	}
	if c := advPlan(43, 500, ids); slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 planned the same run")
	}
	kinds, who := map[int]int{}, map[string]int{}
	for _, m := range a {
		kinds[m.Kind]++
		who[m.Who]++
	}
	if len(kinds) != 10 || len(who) != 3 {
		t.Errorf("500 writes of seed 42 cover %d kinds of change and %d writers, want 10 and 3", len(kinds), len(who))
	}
	t.Logf("seed 42: plan %s (%v by writer)", planDigest(a), fmt.Sprint(who))
}
