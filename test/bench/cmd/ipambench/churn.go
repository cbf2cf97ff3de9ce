package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/test/harness"
)

// churnResult is workload 8's burst of pod churn: each daemon's CPU over
// it, and each new pod's time from Running to its checkpoint and to its
// placement entry.
type churnResult struct {
	pods        int
	span        time.Duration
	cpu         []time.Duration // per daemon, as sampled: checkpointd, flanneld
	toSaved     []time.Duration
	toPublished []time.Duration
}

// churn replaces n of the node's pods at once, as a rollout does: each old
// pod deleted (its sandbox's DEL, which leaves its 30-minute reservation;
// the API object gone), a new one created and Running. It waits until
// checkpointd has saved and published every new pod, and measures the
// daemons' CPU from the first change to the later of that and window (the
// same span for both daemons).
func (b *bench) churn(c *kubernetes.Clientset, t *target, cri *harness.FakeCRI, checkpoints string, n int, window time.Duration, ds ...*daemon) (churnResult, error) {
	res := churnResult{pods: n}
	cpu0 := make([]time.Duration, len(ds))
	for i, d := range ds {
		v, err := d.cpu()
		if err != nil {
			return res, err
		}
		cpu0[i] = v
	}
	start := time.Now()
	// Watched from the first change on, so that a pod created early is
	// not timed from when the last one was.
	w := newChurnWatch(c, checkpoints)
	go w.run()
	defer w.stop()
	for i := range n {
		if err := removeMemPod(c, t, cri, memPod("mem", i)); err != nil {
			return res, fmt.Errorf("deleting pod mem-%d: %w", i, err)
		}
		p, err := b.addMemPod(c, t, cri, "churn", i)
		if err != nil {
			return res, fmt.Errorf("creating pod churn-%d: %w", i, err)
		}
		w.running(p.name)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		saved, published, err := w.times()
		if err != nil {
			return res, err
		}
		if len(saved) == n && len(published) == n {
			res.toSaved, res.toPublished = saved, published
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("after 3 minutes checkpointd had saved %d and published %d of the %d new pods", len(saved), len(published), n)
		}
		if err := errors.Join(ds[0].exited(), ds[1].exited()); err != nil {
			return res, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rest := window - time.Since(start); rest > 0 {
		time.Sleep(rest)
	}
	res.span = time.Since(start)
	for i, d := range ds {
		v, err := d.cpu()
		if err != nil {
			return res, err
		}
		res.cpu = append(res.cpu, v-cpu0[i])
	}
	slices.Sort(res.toSaved)
	slices.Sort(res.toPublished)
	return res, nil
}

// churnWatch times the churn's new pods from Running to their checkpoint
// file and their placement entry, polling every 100 ms.
type churnWatch struct {
	c           *kubernetes.Clientset
	checkpoints string
	mu          sync.Mutex
	since       map[string]time.Time     // Running
	saved       map[string]time.Duration // to the checkpoint
	published   map[string]time.Duration // to the placement entry
	err         error
	done        chan struct{}
}

func newChurnWatch(c *kubernetes.Clientset, checkpoints string) *churnWatch {
	return &churnWatch{c: c, checkpoints: checkpoints, since: map[string]time.Time{}, saved: map[string]time.Duration{},
		published: map[string]time.Duration{}, done: make(chan struct{})}
}

func (w *churnWatch) running(name string) {
	w.mu.Lock()
	w.since[name] = time.Now()
	w.mu.Unlock()
}

func (w *churnWatch) stop() { close(w.done) }

func (w *churnWatch) run() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		names, err := publishedPods(w.c)
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			w.err = err
		}
		for name, at := range w.since {
			if _, ok := w.saved[name]; !ok {
				id := checkpoint.ID{Namespace: memNamespace, Name: name}
				if _, err := os.Stat(filepath.Join(w.checkpoints, id.Key()+checkpoint.Suffix)); err == nil {
					w.saved[name] = now.Sub(at)
				}
			}
			if _, ok := w.published[name]; !ok && names[name] {
				w.published[name] = now.Sub(at)
			}
		}
		w.mu.Unlock()
	}
}

// times returns the times measured so far.
func (w *churnWatch) times() (saved, published []time.Duration, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.saved {
		saved = append(saved, d)
	}
	for _, d := range w.published {
		published = append(published, d)
	}
	return saved, published, w.err
}

// durations prints the median and the largest of sorted ds.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	return fmt.Sprintf("%s median, %s at most", ds[(len(ds)-1)/2].Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
}

// percent is cpu as a share of one CPU over span.
func percent(cpu, span time.Duration) float64 { return 100 * cpu.Seconds() / max(span.Seconds(), 1e-9) }

// overIdle is the CPU a churn cost above the idle rate: churn's CPU over
// churnSpan less what idle's rate (idleCPU over idleSpan) would have used
// in churnSpan; never below zero.
func overIdle(idleCPU, idleSpan, churnCPU, churnSpan time.Duration) time.Duration {
	if idleSpan <= 0 {
		return churnCPU
	}
	base := time.Duration(float64(idleCPU) * churnSpan.Seconds() / idleSpan.Seconds())
	return max(churnCPU-base, 0)
}
