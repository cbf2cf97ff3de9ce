package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// statusPatch is a JSON merge patch of a record's whole status: every
// field present (claims [] when none), so that nothing of the status
// before stays by omission.
type statusPatch struct {
	Status struct {
		NodeUID            types.UID           `json:"nodeUID"`
		ObservedGeneration int64               `json:"observedGeneration"`
		Claims             []placementv1.Claim `json:"claims"`
	} `json:"status"`
}

// writeStatus writes j's status, each claim's Indexed from the index as
// written, if it differs from the record's; then sends the Events of its
// refusals. A record deleted meanwhile is left alone.
func (m *Manager) writeStatus(ctx context.Context, j *judgement, now time.Time) error {
	if j.status == nil {
		return nil
	}
	cur := m.record(j.name)
	if cur == nil || cur.UID != j.record.UID {
		return nil
	}
	// A namespace whose index this term has not written yet (its write
	// failed) keeps the Indexed it had.
	before := map[claimKey]bool{}
	for _, c := range cur.Status.Claims {
		before[claimKey{c.Namespace, c.Identity}] = c.Indexed
	}
	for i := range j.status.Claims {
		c := &j.status.Claims[i]
		if m.st.synced[c.Namespace] {
			c.Indexed = c.Accepted() && m.st.winners[c.Namespace][c.Identity] == j.name
		} else {
			c.Indexed = c.Accepted() && before[claimKey{c.Namespace, c.Identity}]
		}
	}
	var p statusPatch
	p.Status.NodeUID, p.Status.ObservedGeneration, p.Status.Claims = j.status.NodeUID, j.status.ObservedGeneration, j.status.Claims
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if same, err := sameStatus(cur.Status, p); err != nil || !same {
		out, err := m.api.PatchRecordStatus(ctx, j.name, body)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		m.recordView.put(j.name, out)
		m.metrics.statusWrites.Inc()
	}
	m.events.refused(j.record, j.refusals, now)
	return nil
}

// sameStatus reports whether the record's status already says what p
// would write (compared as JSON: times as the API server keeps them).
func sameStatus(cur placementv1.NodeRecordStatus, p statusPatch) (bool, error) {
	var c statusPatch
	c.Status.NodeUID, c.Status.ObservedGeneration, c.Status.Claims = cur.NodeUID, cur.ObservedGeneration, cur.Claims
	if c.Status.Claims == nil {
		c.Status.Claims = []placementv1.Claim{}
	}
	a, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(p)
	return bytes.Equal(a, b), err
}
