package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/placement/entry"
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
	running := map[string]time.Time{} // new pod name → when it was Running
	for i := range n {
		if err := removeMemPod(c, t, cri, memPod("mem", i)); err != nil {
			return res, fmt.Errorf("deleting pod mem-%d: %w", i, err)
		}
		p, err := b.addMemPod(c, t, cri, "churn", i)
		if err != nil {
			return res, fmt.Errorf("creating pod churn-%d: %w", i, err)
		}
		running[p.name] = time.Now()
	}
	saved, published := map[string]time.Duration{}, map[string]time.Duration{}
	deadline := time.Now().Add(3 * time.Minute)
	for len(saved) < n || len(published) < n {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("after 3 minutes checkpointd had saved %d and published %d of the %d new pods", len(saved), len(published), n)
		}
		if err := errors.Join(ds[0].exited(), ds[1].exited()); err != nil {
			return res, err
		}
		now := time.Now()
		for name, at := range running {
			if _, ok := saved[name]; !ok {
				id := checkpoint.ID{Namespace: memNamespace, Name: name}
				if _, err := os.Stat(filepath.Join(checkpoints, id.Key()+checkpoint.Suffix)); err == nil {
					saved[name] = now.Sub(at)
				}
			}
		}
		names, err := publishedPods(c)
		if err != nil {
			return res, err
		}
		for name, at := range running {
			if _, ok := published[name]; !ok && names[name] {
				published[name] = now.Sub(at)
			}
		}
		time.Sleep(100 * time.Millisecond)
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
	for name := range running {
		res.toSaved = append(res.toSaved, saved[name])
		res.toPublished = append(res.toPublished, published[name])
	}
	slices.Sort(res.toSaved)
	slices.Sort(res.toPublished)
	return res, nil
}

// publishedPods returns the pods the node's placement entries name.
func publishedPods(c *kubernetes.Clientset) (map[string]bool, error) {
	cms, err := c.CoreV1().ConfigMaps(memNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: placement.IndexLabel})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, cm := range cms.Items {
		lines, _ := entry.ParseValue(cm.Data[memNode])
		for _, l := range lines {
			out[l.Pod] = true
		}
	}
	return out, nil
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
