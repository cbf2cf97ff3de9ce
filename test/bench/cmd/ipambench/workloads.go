package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// bench holds the run's settings and collects its results.
type bench struct {
	cfg    config
	netns  string // path of the driver's idle network namespace
	report *report
	seq    int // numbers target directories
}

// newTarget gives kind a fresh data directory and network.
func (b *bench) newTarget(kind, network, subnet string) (*target, error) {
	b.seq++
	root := filepath.Join(b.cfg.work, fmt.Sprintf("%02d-%s-%s", b.seq, network, kind))
	t := &target{
		kind:     kind,
		network:  network,
		subnet:   subnet,
		dir:      filepath.Join(root, "data"),
		netnsDir: filepath.Join(root, "netns"),
		emptyDir: filepath.Join(root, "no-host-local"),

		netnsTarget: b.netns,
	}
	switch kind {
	case kindHostLocal:
		t.bin = b.cfg.hostLocalBin
	case kindStickyIP:
		t.bin = b.cfg.stickyipBin
		if b.cfg.stickyipLog {
			t.logFile = filepath.Join(root, "stickyip.log")
		}
	}
	for _, d := range []string{t.dir, t.netnsDir, t.emptyDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// targets returns one fresh target per enabled plugin, host-local first.
func (b *bench) targets(network, subnet string) ([]*target, error) {
	var ts []*target
	for _, k := range b.cfg.plugins {
		t, err := b.newTarget(k, network, subnet)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// addDel runs ADD then DEL for p and returns both results; the netns file is made first.
func addDel(t *target, p pod) (add, del callResult) {
	if err := t.prepare(p); err != nil {
		return callResult{err: err}, callResult{}
	}
	add = t.call("ADD", p)
	if add.err != nil {
		return add, callResult{}
	}
	del = t.call("DEL", p)
	return add, del
}

// interleaved runs fn for each target on each iteration, alternating which target goes
// first so that neither plugin always runs on a warmer cache.
func interleaved(ts []*target, n int, fn func(t *target, i int) error) error {
	for i := 0; i < n; i++ {
		for j := range ts {
			k := j
			if i%2 == 1 {
				k = len(ts) - 1 - j
			}
			if err := fn(ts[k], i); err != nil {
				return err
			}
		}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
