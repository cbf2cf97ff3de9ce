package placement

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/stickyip/stickyip/checkpointd/placement/entry"
)

// Bounds of one shard's publication in one pass.
const (
	maxWrites  = 32 // writes (claims come MaxClaims at a time)
	maxRereads = 2  // reads after a write found the shard changed, and rounds of claims refused as stale
	maxTaken   = 40 // tries while another reference carries the node's UID (takenWait apart)
)

// takenWait is the wait before the write is tried again after a refusal
// for a reference that carries the node's UID ("reference taken:"), at
// random between it and twice it: the garbage collector removes such a
// reference within its pass, and the index policy lets it not come back.
const takenWait = 50 * time.Millisecond

// outcome is what became of a write.
type outcome int

const (
	made    outcome = iota // made
	reread                 // refused: the shard changed since it was read, read it again
	refused                // the index policy refused a claim, now skipped: plan again
	stale                  // claims another node made since the view, now left out: plan again
	taken                  // another reference carries the node's UID: try again shortly
	failed                 // refused or failed otherwise: tried again after a wait
)

// publish brings node's value in one shard to want, in as few writes as
// the claims allow: each write carries the whole value, up to MaxClaims
// claims, and returns the shard as written, on which the next is planned.
// A claim another node made since the node's view of the shard costs that
// claim only: the write is made again at once without it, then the claim is
// tried again on the shard as written (at most maxRereads rounds a pass).
func (p *Publisher) publish(ctx context.Context, ref shardRef, want map[string]Line, now time.Time, lost map[Key]string) {
	p.visits++
	name := ref.Namespace + "/" + ref.Name
	later := map[string]bool{} // claims refused as stale, left out of the next write
	skip := func(id string, l Line) bool {
		return later[id] || p.refused[refusal{Key{ref.Namespace, id}, l.Pod, l.Since}]
	}
	s, err := p.view(ctx, ref, now)
	if err != nil {
		p.fail("get", name, err)
		return
	}
	p.ok("get")
	p.noteBadEntries(name, s)
	writes, rereads, rounds, tries := 0, 0, 0, 0
	for {
		st, superseded := Plan(p.opts.Node, want, s, skip)
		if st == nil && len(later) > 0 && rounds < maxRereads {
			// Only claims refused as stale are left: try them again on the
			// shard as it is now.
			rounds++
			clear(later)
			if s, err = p.read(ctx, ref, now); err != nil {
				p.fail("get", name, err)
				return
			}
			continue
		}
		if st == nil || writes == maxWrites {
			for _, id := range superseded {
				lost[Key{ref.Namespace, id}] = laterNode(s, p.opts.Node, id)
			}
			if st == nil {
				delete(p.retry, ref)
				p.settled(ref, s)
			}
			if len(later) > 0 {
				p.contested++ // those claims wait for the next pass, which must not be skipped as idle
			}
			return
		}
		got, res, ids := p.write(ctx, ref, s, st, now)
		if res != taken {
			writes++
		}
		switch res {
		case made:
			s = got
			if len(later) > 0 && rounds < maxRereads {
				rounds++
				clear(later) // the shard as written is newer than those claims' rivals
			}
		case refused: // that claim is skipped now: plan again
		case stale:
			for _, id := range ids {
				later[id] = true
			}
		case taken:
			if tries++; tries == maxTaken {
				p.backOff(ref, now)
				return
			}
			p.wait(ctx, p.takenWait+rand.N(p.takenWait))
		case reread:
			if rereads == maxRereads {
				p.backOff(ref, now)
				return
			}
			rereads++
			if s, err = p.read(ctx, ref, now); err != nil {
				p.fail("get", name, err)
				return
			}
		default:
			return
		}
	}
}

// settled records a shard that needs no write: it holds the node's
// entries or not.
func (p *Publisher) settled(ref shardRef, s *Shard) {
	if _, mine := s.Values[p.opts.Node]; !mine {
		if err := p.written.mark(ref, false); err != nil {
			p.fail("written", ref.Namespace+"/"+ref.Name, err)
		}
	}
}

// view returns ref as last seen, read again when that is older than
// Resync. A shard never seen and never written by the node is not read: its
// first write is planned on nothing (an identity no other node lists needs
// no more), and returns it.
func (p *Publisher) view(ctx context.Context, ref shardRef, now time.Time) (*Shard, error) {
	v, seen := p.shards[ref]
	switch {
	case seen && now.Sub(v.at) < p.opts.Resync:
		return v.shard, nil
	case !seen && !p.written.has(ref):
		return &Shard{Values: map[string]string{}}, nil
	}
	return p.read(ctx, ref, now)
}

// read reads ref from the API server.
func (p *Publisher) read(ctx context.Context, ref shardRef, now time.Time) (*Shard, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	p.reads.Inc()
	s, err := p.api.Get(ctx, ref.Namespace, ref.Name)
	if err != nil {
		delete(p.shards, ref)
		return nil, err
	}
	p.shards[ref] = view{shard: s, at: now}
	return s, nil
}

// write makes st on s, the shard as last seen; with outcome stale, it
// returns the identities whose claims another node made since.
func (p *Publisher) write(ctx context.Context, ref shardRef, s *Shard, st *Step, now time.Time) (*Shard, outcome, []string) {
	name := ref.Namespace + "/" + ref.Name
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	if p.nodeUID == "" {
		p.reads.Inc()
		uid, err := p.api.NodeUID(ctx)
		if err != nil {
			p.fail("node", name, fmt.Errorf("read Node %s (the shards' owner): %w", p.opts.Node, err))
			p.backOff(ref, now)
			return nil, failed, nil
		}
		p.ok("node")
		p.nodeUID = uid
	}
	value := entry.FormatValue(st.Lines)
	start := time.Now()
	got, err := p.api.Write(ctx, ref.Namespace, ref.Name, Change{Value: value, UID: p.nodeUID, Stale: s.StaleOwn(p.opts.Node, p.nodeUID)})
	p.pause(ctx, time.Since(start))
	if err != nil {
		delete(p.shards, ref) // read it again before the next write
		res, ids := p.refusedWrite(ref, st, err, now)
		return nil, res, ids
	}
	p.ok("apply")
	p.shards[ref] = view{shard: got, at: now}
	p.writes.WithLabelValues(st.Kind).Inc()
	if err := p.written.mark(ref, len(st.Lines) > 0); err != nil {
		p.fail("written", name, err)
	}
	args := []any{"shard", name, "entries", len(st.Lines)}
	if len(st.Claims) > 0 {
		args = append(args, "claims", st.Claims, "seq", claimedSeq(st))
	}
	p.opts.Log.Info("placement "+st.Kind+" written", args...)
	return got, made, nil
}

// maxPause bounds the pause after a write.
const maxPause = time.Second

// pause waits twice as long as a write took, at most maxPause, before the
// node's next write. The API server applies concurrent writes of one shard
// one after the other, running the index policy again for each write each
// time another was applied first: when many nodes write at once (a
// StatefulSet scaled up over many nodes, a cluster booting), writes slow
// down, and each node leaves the server room in proportion (with 100 nodes
// writing at once, without it, most of the server's time went to writes
// tried again). An idle server answers in milliseconds: the pause is as
// short.
func (p *Publisher) pause(ctx context.Context, took time.Duration) {
	p.wait(ctx, min(2*took, maxPause))
}

// wait waits d, or until ctx is done.
func (p *Publisher) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// claimedSeq is the Seq of st's claims.
func claimedSeq(st *Step) uint64 {
	i := slices.IndexFunc(st.Lines, func(l Line) bool { return l.Identity == st.Claims[0] })
	return st.Lines[i].Seq
}

// refusedPod reads the pod named in the index policy's refusal of a claim
// for a pod not bound to the writer.
var refusedPod = regexp.MustCompile(`; pod (\S+) is not`)

// staleIDs reads the identities named in the index policy's refusal of
// claims another node made since the writer's view.
var staleIDs = regexp.MustCompile(`stale claim: node \S+: another node claimed ([^()]+?) since`)

// refusedWrite sorts a failed write. The index policy's verdict on a claim
// is final for that pod and ADD: the claim is skipped from then on and the
// others are written again at once. Claims another node made since the
// node's view are left out of a write made again at once, and tried again
// on the shard as written. A write on a shard that changed otherwise
// meanwhile (a seq beyond it) is made again on the shard read again; one
// refused because another reference carries the node's UID is tried again
// shortly. Anything else (RBAC not applied yet, the API server away, a full
// shard, pods readable by every node) is tried again after a growing wait.
func (p *Publisher) refusedWrite(ref shardRef, st *Step, err error, now time.Time) (outcome, []string) {
	name := ref.Namespace + "/" + ref.Name
	msg := err.Error()
	policy := apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	switch {
	case policy && strings.Contains(msg, "claim refused:") && !strings.Contains(msg, "not bound to them"):
		var pods []string
		if m := refusedPod.FindStringSubmatch(msg); m != nil {
			pods = []string{m[1]}
		}
		marked := 0
		for _, id := range st.Claims {
			l := st.Lines[slices.IndexFunc(st.Lines, func(l Line) bool { return l.Identity == id })]
			if pods == nil && !strings.HasSuffix(l.Pod, "-"+p.opts.Node) || pods != nil && !slices.Contains(pods, l.Pod) {
				continue
			}
			p.refused[refusal{Key{ref.Namespace, id}, l.Pod, l.Since}] = true
			marked++
			p.errs.WithLabelValues("refused").Inc()
			p.opts.Log.Warn("placement claim refused by the index policy; not tried again for this pod and ADD",
				"identity", ref.Namespace+"/"+id, "pod", l.Pod, "shard", name, "err", msg)
		}
		if marked == 0 { // not one of this write's claims: do not loop on it
			p.fail("apply", name, err)
			p.backOff(ref, now)
			return failed, nil
		}
		return refused, nil
	case policy && strings.Contains(msg, "stale claim:"):
		if m := staleIDs.FindStringSubmatch(msg); m != nil {
			ids := slices.DeleteFunc(strings.Fields(m[1]), func(id string) bool { return !slices.Contains(st.Claims, id) })
			if len(ids) > 0 {
				p.opts.Log.Info("placement claims made by another node since this node's view; written again without them",
					"shard", name, "identities", ids)
				return stale, ids
			}
		}
		return reread, nil
	case policy && strings.Contains(msg, "reference taken:"):
		p.fail("taken", name, err) // the garbage collector removes that reference: tried again shortly
		return taken, nil
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return reread, nil
	}
	p.fail("apply", name, err)
	p.backOff(ref, now)
	return failed, nil
}

// backOffJitter spreads the waits: each is longer by up to this fraction,
// at random, so that nodes whose writes failed together (an API server
// outage) do not come back together, in lockstep on the same shards.
const backOffJitter = 0.5

// backOff makes ref wait before its next write: Interval, doubled with each
// failure in a row up to MaxBackoff, each wait plus up to half again at
// random (apimachinery's wait.Backoff).
func (p *Publisher) backOff(ref shardRef, now time.Time) {
	b, ok := p.retry[ref]
	if !ok {
		b.steps = wait.Backoff{Duration: p.opts.Interval, Factor: 2, Jitter: backOffJitter, Steps: math.MaxInt32, Cap: p.opts.MaxBackoff}
	}
	b.next = now.Add(b.steps.Step())
	p.retry[ref] = b
}
