package placement

import "maps"

// ClaimedLater returns the identities this node holds that another node
// claimed after it, by that node, as the last pass saw the index (the pod
// ran there since: the hint names that node). A shard not read in that
// pass (its write backing off) adds none. checkpointd's retention ends the
// hold of a StatefulSet's reservation here once its pod runs elsewhere.
func (p *Publisher) ClaimedLater() map[Key]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.lost)
}
