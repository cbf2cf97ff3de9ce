package claims

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/facts"
)

var (
	t0      = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	created = metav1.NewTime(t0.Add(-time.Hour))
)

func pod(mut ...func(*facts.Pod)) *facts.Pod {
	p := &facts.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u1", CreationTimestamp: created}, NodeName: "n1"}
	for _, m := range mut {
		m(p)
	}
	return p
}

func entry() placementv1.Entry {
	return placementv1.Entry{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "u1",
		Since: metav1.NewTime(t0.Add(-30 * time.Minute)), Addresses: []string{"10.0.0.5"}}
}

func keyed(e placementv1.Entry) placementv1.Entry { e.Identity = "identity:cache"; return e }

// The claim an earlier pod of the identity left accepted.
var earlier = &placementv1.Claim{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "u0", Created: metav1.NewTime(t0.Add(-2 * time.Hour))}

const ttl, wait = 10 * time.Minute, time.Minute

// judgeTests walks every rule of the package doc's table.
var judgeTests = []struct {
	name    string
	in      Input
	outcome Outcome
	rule    string
	refused string // a part of Claim.Refused ("": none)
	podUID  types.UID
	created time.Time
}{
	{name: "bound to the node", in: Input{Entry: entry(), Pod: pod()}, outcome: Accepted, podUID: "u1", created: created.Time},
	{name: "wrong namespace", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.Namespace = "other" })},
		outcome: Refused, rule: RuleNamespace, refused: "in namespace other"},
	{name: "wrong name", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.Name = "db-1" })},
		outcome: Refused, rule: RuleName, refused: "named db-1"},
	{name: "other node", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "n2" })},
		outcome: Refused, rule: RuleNode, refused: "bound to node n2, not n1"},
	{name: "not bound yet", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "" })},
		outcome: Pending},
	{name: "never bound", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "" }), PendingSince: t0.Add(-wait)},
		outcome: Refused, rule: RuleNode, refused: "not bound to any node"},
	{name: "mirror pod", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.Mirror = true })},
		outcome: Refused, rule: RuleMirror, refused: "mirror pod"},
	{name: "Node owner", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeOwned = true })},
		outcome: Refused, rule: RuleNodeOwner, refused: "owned by a Node"},
	{name: "unkeyed entry, keyed pod", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.Keyed, p.IdentityKey = true, "cache" })},
		outcome: Refused, rule: RuleIdentity, refused: "identity is identity:cache, not db-0"},
	{name: "keyed entry, unkeyed pod", in: Input{Entry: keyed(entry()), Pod: pod()},
		outcome: Refused, rule: RuleIdentity, refused: "identity is db-0, not identity:cache"},
	{name: "keyed entry, other key", in: Input{Entry: keyed(entry()), Pod: pod(func(p *facts.Pod) { p.Keyed, p.IdentityKey = true, "cash" })},
		outcome: Refused, rule: RuleIdentity, refused: "identity is identity:cash, not identity:cache"},
	{name: "keyed entry, same key", in: Input{Entry: keyed(entry()), Pod: pod(func(p *facts.Pod) { p.Keyed, p.IdentityKey = true, "cache" })},
		outcome: Accepted, podUID: "u1", created: created.Time},
	{name: "tombstone young", in: Input{Entry: entry(), Pod: pod(), DeletedAt: t0.Add(-ttl + time.Second)},
		outcome: Accepted, podUID: "u1", created: created.Time},
	{name: "tombstone young, other node", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "n2" }), DeletedAt: t0.Add(-time.Second)},
		outcome: Refused, rule: RuleNode, refused: "bound to node n2"},
	{name: "tombstone old", in: Input{Entry: entry(), Pod: pod(), DeletedAt: t0.Add(-ttl)}, outcome: Pending},
	{name: "tombstone old, waited", in: Input{Entry: entry(), Pod: pod(), DeletedAt: t0.Add(-ttl), PendingSince: t0.Add(-wait)},
		outcome: Refused, rule: RuleUnknown, refused: "no such pod"},
	{name: "pod unknown", in: Input{Entry: entry()}, outcome: Pending},
	{name: "pod unknown, waited less", in: Input{Entry: entry(), PendingSince: t0.Add(-wait + time.Second)}, outcome: Pending},
	{name: "pod unknown, waited", in: Input{Entry: entry(), PendingSince: t0.Add(-wait)},
		outcome: Refused, rule: RuleUnknown, refused: "(uid u1): no such pod"},
	{name: "wrong UID, waited", in: Input{Entry: entry(), Named: pod(func(p *facts.Pod) { p.UID = "u9" }), PendingSince: t0.Add(-wait)},
		outcome: Refused, rule: RuleUnknown, refused: "ns/db-0 is uid u9"},
	{name: "wrong UID", in: Input{Entry: entry(), Named: pod(func(p *facts.Pod) { p.UID = "u9" })}, outcome: Pending},
	{name: "pod unknown, former line", in: Input{Entry: entry(), Former: true}, outcome: Imported, podUID: "u1", created: entry().Since.Time},
	{name: "tombstone old, former line", in: Input{Entry: entry(), Pod: pod(), DeletedAt: t0.Add(-2 * ttl), Former: true},
		outcome: Imported, podUID: "u1", created: entry().Since.Time},
	{name: "accepted before", in: Input{Entry: entry(), Prev: &placementv1.Claim{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "u1", Created: created}},
		outcome: Kept, podUID: "u1", created: created.Time},
	{name: "accepted before, pod gone since", in: Input{Entry: entry(), PendingSince: t0.Add(-time.Hour),
		Prev: &placementv1.Claim{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "u1", Created: created}},
		outcome: Kept, podUID: "u1", created: created.Time},
	{name: "accepted before, now on another node", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "n2" }),
		Prev: &placementv1.Claim{Namespace: "ns", Identity: "db-0", Pod: "db-0", PodUID: "u1", Created: created}},
		outcome: Kept, podUID: "u1", created: created.Time},
	{name: "newer pod refused, earlier kept", in: Input{Entry: entry(), Pod: pod(func(p *facts.Pod) { p.NodeName = "n2" }), Prev: earlier},
		outcome: Refused, rule: RuleNode, refused: "bound to node n2", podUID: "u0", created: earlier.Created.Time},
	{name: "newer pod pending, earlier kept", in: Input{Entry: entry(), Prev: earlier}, outcome: Pending, podUID: "u0", created: earlier.Created.Time},
	{name: "newer pod accepted over earlier", in: Input{Entry: entry(), Pod: pod(), Prev: earlier}, outcome: Accepted, podUID: "u1", created: created.Time},
	{name: "refused before, pending again", in: Input{Entry: entry(), Prev: &placementv1.Claim{Namespace: "ns", Identity: "db-0", Refused: "pod ns/db-0 (uid u1): bound to node n2, not n1"}},
		outcome: Pending, refused: "bound to node n2"},
}

func TestJudge(t *testing.T) {
	for _, tt := range judgeTests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Node, in.Now, in.TombstoneTTL, in.PendingFor = "n1", t0, ttl, wait
			r := Judge(in)
			c := r.Claim
			if r.Outcome != tt.outcome || r.Rule != tt.rule {
				t.Fatalf("outcome %d rule %q, want %d %q (claim %+v)", r.Outcome, r.Rule, tt.outcome, tt.rule, c)
			}
			if c.Namespace != "ns" || c.Identity != in.Entry.Identity || c.PodUID != tt.podUID || !c.Created.Time.Equal(tt.created) {
				t.Errorf("claim %+v, want pod uid %q created %v", c, tt.podUID, tt.created)
			}
			if (tt.refused == "") != (c.Refused == "") || !strings.Contains(c.Refused, tt.refused) {
				t.Errorf("refused %q, want one containing %q", c.Refused, tt.refused)
			}
			if (r.Outcome == Pending) != !r.RetryAt.IsZero() {
				t.Errorf("retry at %v for outcome %d", r.RetryAt, r.Outcome)
			}
			if r.Outcome == Pending && !r.RetryAt.After(t0) {
				t.Errorf("pending, retry at %v: not after now", r.RetryAt)
			}
		})
	}
}

func TestCounts(t *testing.T) {
	rec := &placementv1.NodeRecord{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: placementv1.NodeRecordSpec{NodeUID: "a"}}
	for _, tt := range []struct {
		node types.UID
		ok   bool
		why  string
	}{{"a", true, ""}, {"b", false, "written for Node uid a, Node n1 is uid b"}, {"", false, "no Node n1"}} {
		ok, why := Counts(rec, tt.node)
		if ok != tt.ok || why != tt.why {
			t.Errorf("node uid %q: %v %q, want %v %q", tt.node, ok, why, tt.ok, tt.why)
		}
	}
}
