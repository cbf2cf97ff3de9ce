package placement

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// laterNode names the node that claimed id after node in s.
func laterNode(s *Shard, node, id string) string {
	n, _, _ := latest(s.Others(node, id))
	return n
}

// noteBadEntries counts and logs the node's own entries in s that cannot be
// read (the next write drops them); other nodes' are theirs to mend.
func (p *Publisher) noteBadEntries(name string, s *Shard) {
	if _, bad := s.Lines(p.opts.Node); len(bad) > 0 {
		p.errs.WithLabelValues("entry").Add(float64(len(bad)))
		p.opts.Log.Warn("placement: own entries that cannot be read are dropped", "shard", name, "bad", len(bad), "first", bad[0].Error())
	}
}

// noteLost logs each identity another node claimed later, once.
func (p *Publisher) noteLost(now map[Key]string) {
	for k, n := range now {
		if p.lost[k] != n {
			p.opts.Log.Info("identity claimed later by another node (it ran the pod since); the placement hint names that node",
				"identity", k.Namespace+"/"+k.Identity, "node", n)
		}
	}
	p.mu.Lock()
	p.lost = now
	p.mu.Unlock()
}

// fail counts a failed step and logs it when it differs from the step's last
// logged failure (the API server being away fails every pass alike).
func (p *Publisher) fail(step, what string, err error) {
	p.fails++
	p.errs.WithLabelValues(step).Inc()
	msg := err.Error()
	if step == "apply" && apierrors.IsForbidden(err) && (strings.Contains(msg, "cannot patch") || strings.Contains(msg, "cannot create")) {
		msg = "nodes may not write the placement index yet (deploy/placement/nodes, applied once deploy/placement's index policy is in effect: docs/install.md): " + msg
	}
	p.mu.Lock()
	same := p.logged[step] == msg
	p.logged[step] = msg
	p.mu.Unlock()
	if same {
		p.opts.Log.Debug("placement step failed again", "step", step, "what", what, "err", msg)
		return
	}
	p.opts.Log.Warn("placement step failed; retried", "step", step, "what", what, "err", msg)
}

// ok forgets a step's last failure, so the next one is logged.
func (p *Publisher) ok(step string) {
	p.mu.Lock()
	delete(p.logged, step)
	p.mu.Unlock()
}
