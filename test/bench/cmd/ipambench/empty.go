package main

// workloadEmpty is workload 1: ADD then DEL in an empty /16.
func (b *bench) workloadEmpty() error {
	ts, err := b.targets("bench-empty", "10.244.0.0/16")
	if err != nil {
		return err
	}
	add, del, pair := map[string]samples{}, map[string]samples{}, map[string]samples{}
	// One untimed pair per plugin: the first run of a binary pays for page faults.
	if err := interleaved(ts, 1, func(t *target, i int) error {
		a, d := addDel(t, newPod("warm1", i))
		return firstErr(a.err, d.err)
	}); err != nil {
		return err
	}
	err = interleaved(ts, b.cfg.nEmpty, func(t *target, i int) error {
		a, d := addDel(t, newPod("empty", i))
		if err := firstErr(a.err, d.err); err != nil {
			return err
		}
		add[t.kind] = append(add[t.kind], a.elapsed)
		del[t.kind] = append(del[t.kind], d.elapsed)
		pair[t.kind] = append(pair[t.kind], a.elapsed+d.elapsed)
		return nil
	})
	if err != nil {
		return err
	}
	b.report.latency("1. empty /16", "ADD", add)
	b.report.latency("1. empty /16", "DEL", del)
	b.report.latency("1. empty /16", "ADD+DEL", pair)
	b.report.targetRatio("Empty /16 ADD+DEL median", pair, 1.0)
	return nil
}
