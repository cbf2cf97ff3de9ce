package placement

import (
	"context"
	"errors"
)

// noteVerdicts reads the controller's verdicts in the record's status:
// how many of the node's identities the index gives to another node
// (placement_superseded), each logged once when it happens, and each
// refused claim logged once.
func (p *Publisher) noteVerdicts() {
	if p.opts.Record == nil {
		return
	}
	r, _ := p.opts.Record()
	if r == nil || r.Status.NodeUID != r.Spec.NodeUID {
		p.superseded.Set(0)
		return
	}
	n := 0
	now := map[string]bool{}
	for _, c := range r.Status.Claims {
		key := c.Namespace + "/" + c.Identity
		switch {
		case c.Accepted() && !c.Indexed:
			n++
			now["later/"+key] = true
			if !p.later["later/"+key] {
				p.opts.Log.Info("identity claimed later by another node (it ran the pod since); the placement hint names that node", "identity", key)
			}
		case c.Refused != "":
			now["refused/"+key+"/"+c.Refused] = true
			if !p.later["refused/"+key+"/"+c.Refused] {
				p.opts.Log.Warn("placement: the controller refused this node's claim", "identity", key, "why", c.Refused)
			}
		}
	}
	p.later = now
	p.superseded.Set(float64(n))
}

// FormerAnnotation is the Node annotation in which checkpointd listed the
// former index's shards holding the node's entries; nothing reads it now.
const FormerAnnotation = "stickyip.io/placement-shards"

// Former is what the publisher asks of the API server about the node's
// Node (an API may implement it).
type Former interface {
	// ForgetFormer removes FormerAnnotation from the node's Node.
	ForgetFormer(ctx context.Context) error
}

// clearFormer removes FormerAnnotation from the node's Node once, if it
// carries one (a node upgraded from the former index).
func (p *Publisher) clearFormer(ctx context.Context, node interface{ GetAnnotations() map[string]string }) {
	f, ok := p.api.(Former)
	if p.cleared || !ok {
		return
	}
	if _, has := node.GetAnnotations()[FormerAnnotation]; !has {
		p.cleared = true
		return
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if err := f.ForgetFormer(cctx); err != nil {
		p.fail("node", errors.Join(errors.New("cannot remove the former index's annotation "+FormerAnnotation+" from the node's Node"), err))
		return
	}
	p.cleared = true
}
