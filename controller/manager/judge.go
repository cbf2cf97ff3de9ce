package manager

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/claims"
	"github.com/stickyip/stickyip/controller/index"
)

// judgement is what a pass decided for one record.
type judgement struct {
	name string
	// record is the record as judged (nil: there is none).
	record *placementv1.NodeRecord
	// status is its status to be (nil: leave it as it is).
	status *placementv1.NodeRecordStatus
	// refusals are the claims refused by this judgement (Events).
	refusals []refusal
	// remove: its Node has been gone NodeGrace; delete it.
	remove bool
	// retry is when to judge it again (zero: on a change only).
	retry time.Time
}

type refusal struct{ rule, message string }

func (j *judgement) retryAt(t time.Time) {
	if !t.IsZero() && (j.retry.IsZero() || t.Before(j.retry)) {
		j.retry = t
	}
}

// judge judges record name: whether it counts, each entry's claim and
// retention; it updates the record's index candidates and returns the
// namespaces whose candidates changed.
func (m *Manager) judge(ctx context.Context, name string, now time.Time) (*judgement, map[string]bool) {
	j := &judgement{name: name}
	rec := m.record(name)
	if rec == nil {
		return j, m.forgetRecord(name)
	}
	j.record = rec
	node := m.node(name)
	if node == nil {
		since := m.seen.nodeGone(name, now)
		if now.Sub(since) >= m.cfg.NodeGrace {
			j.remove = true
		} else {
			j.retryAt(since.Add(m.cfg.NodeGrace))
		}
		return j, m.forgetRecord(name)
	}
	if ok, _ := claims.Counts(rec, node.UID); !ok {
		return j, m.forgetRecord(name)
	}
	prev := map[claimKey]*placementv1.Claim{}
	if rec.Status.NodeUID == node.UID {
		for i := range rec.Status.Claims {
			c := &rec.Status.Claims[i]
			prev[claimKey{c.Namespace, c.Identity}] = c
		}
	}
	status := &placementv1.NodeRecordStatus{NodeUID: node.UID, ObservedGeneration: rec.Generation,
		Claims: make([]placementv1.Claim, 0, len(rec.Spec.Entries))}
	contrib := map[claimKey]index.Candidate{}
	pending := map[pendingKey]time.Time{}
	judged := make(map[claimKey]bool, len(rec.Spec.Entries))
	var f follows
	for i := range rec.Spec.Entries {
		e := &rec.Spec.Entries[i]
		k := claimKey{e.Namespace, e.Identity}
		if judged[k] {
			continue // the schema's list-map keys forbid it; the first one counts
		}
		judged[k] = true
		c := m.judgeEntry(ctx, j, e, prev[k], now, pending, &f)
		if c.Accepted() {
			contrib[k] = index.Candidate{Node: name, Created: c.Created.Time, Since: e.Since.Time}
		}
		status.Claims = append(status.Claims, c)
	}
	slices.SortFunc(status.Claims, func(a, b placementv1.Claim) int {
		return strings.Compare(a.Namespace+"/"+a.Identity, b.Namespace+"/"+b.Identity)
	})
	j.status = status
	if len(pending) > 0 {
		m.st.pending[name] = pending
	} else {
		delete(m.st.pending, name)
	}
	m.seen.follow(name, f)
	return j, m.st.setContrib(name, contrib)
}

// forgetRecord drops all the controller keeps of record name's claims.
func (m *Manager) forgetRecord(name string) map[string]bool {
	delete(m.st.pending, name)
	m.seen.follow(name, follows{})
	return m.st.setContrib(name, nil)
}

// judgeEntry returns the claim of entry e of record j.name.
func (m *Manager) judgeEntry(ctx context.Context, j *judgement, e *placementv1.Entry, prev *placementv1.Claim,
	now time.Time, pending map[pendingKey]time.Time, f *follows) placementv1.Claim {
	in := claims.Input{Node: j.name, Entry: *e, Prev: prev, Now: now, TombstoneTTL: m.cfg.TombstoneTTL, PendingFor: m.cfg.PendingFor}
	pk := pendingKey{claimKey{e.Namespace, e.Identity}, e.PodUID}
	if prev == nil || !prev.Accepted() || prev.PodUID != e.PodUID {
		in.Pod, in.DeletedAt = m.pod(e.PodUID)
		in.PendingSince = m.st.pending[j.name][pk]
		if in.Pod == nil || (!in.DeletedAt.IsZero() && now.Sub(in.DeletedAt) >= m.cfg.TombstoneTTL) {
			in.Named = m.podNamed(e.Namespace, e.Pod)
			// Only a reservation's pod is gone for good; a running one's is
			// on its way into the cache.
			if m.cfg.ImportFormerIndex && !e.Running() {
				in.Former = m.former.backs(ctx, now, e.Namespace, j.name, e.Identity, e.Pod)
			}
		}
	}
	r := claims.Judge(in)
	c := r.Claim
	switch r.Outcome {
	case claims.Pending:
		pending[pk] = r.RetryAt.Add(-m.cfg.PendingFor)
		f.pods = append(f.pods, e.PodUID)
		j.retryAt(r.RetryAt)
	case claims.Refused:
		if prev == nil || prev.Refused != c.Refused {
			j.refusals = append(j.refusals, refusal{rule: r.Rule, message: "claim " + e.Identity + " in " + e.Namespace + " refused: " + c.Refused})
			m.metrics.claims.WithLabelValues("refused").Inc()
		}
	case claims.Accepted, claims.Imported:
		m.metrics.claims.WithLabelValues(map[claims.Outcome]string{claims.Accepted: "accepted", claims.Imported: "imported"}[r.Outcome]).Inc()
	}
	if c.Accepted() {
		var before *placementv1.Retention
		if prev != nil && prev.PodUID == c.PodUID {
			before = prev.StatefulSet
		}
		c.StatefulSet = m.retain(e.Namespace, &c, before, f)
	}
	return c
}
