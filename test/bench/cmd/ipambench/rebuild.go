package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// maxPods is how many pods the nodes of workloads 7 and 8 run: the
// kubelet's default maximum.
const maxPods = 110

// workloadRebuild is workload 7 (stickyip): a node with 110 pods (every
// other one with a reservation annotation) whose store's first 32 KiB are
// overwritten; timed from the damage to the first ADD of a new pod that
// succeeds: (a) checkpointd's rebuild (`checkpointd rebuild-store`, the
// code the daemon runs once its pass sees the damage) from the runtime's
// sandboxes (a CRI server of the driver's, listing the 110), their network
// namespaces and the CNI result cache (libcni's files); (b) the operator's
// recipe before rebuilds: the store moved aside (and its creation mark
// removed, which it now takes to start over), then the drain: the 110 pods'
// DELs, 8 at a time, on the new empty store, then the ADD. (b) leaves out
// what a drain costs beyond the node's CNI calls: the evictions, each pod's
// termination grace period and its rescheduling elsewhere.
func (b *bench) workloadRebuild() error {
	if !b.cfg.has(kindStickyIP) {
		b.report.note("Workload 7 skipped: stickyip not enabled.")
		return nil
	}
	if _, err := os.Stat(b.cfg.checkpointdBin); err != nil {
		return fmt.Errorf("checkpointd binary: %w (make build)", err)
	}
	t, err := b.newTarget(kindStickyIP, "bench-rebuild", "10.246.0.0/24")
	if err != nil {
		return err
	}
	root := filepath.Dir(t.dir)
	cri, err := harness.StartFakeCRI(filepath.Join(root, "cri.sock"))
	if err != nil {
		return err
	}
	defer cri.Stop()
	pods, held, err := b.rebuildNode(t, cri, filepath.Join(root, "results"))
	if err != nil {
		return err
	}
	pristine := filepath.Join(root, "pristine")
	if err := copyDir(t.dir, pristine); err != nil {
		return err
	}
	var rebuilt, recipe samples
	for round := range 3 {
		d, err := b.timeToFirstADD(t, pristine, round, held, func() error { return b.rebuildStore(t, root) })
		if err != nil {
			return fmt.Errorf("rebuild, round %d: %w", round, err)
		}
		rebuilt = append(rebuilt, d)
		d, err = b.timeToFirstADD(t, pristine, round, nil, func() error { return drainRecipe(t, pods) })
		if err != nil {
			return fmt.Errorf("operator's recipe, round %d: %w", round, err)
		}
		recipe = append(recipe, d)
	}
	label := fmt.Sprintf("7. damaged store, %d pods", maxPods)
	b.report.latencyOne(label, "rebuilt by checkpointd, to the first ADD", kindStickyIP, rebuilt)
	b.report.latencyOne(label, "operator's recipe (moved aside, drain's DELs), to the first ADD", kindStickyIP, recipe)
	b.report.targetSeconds("Damaged store on a 110-pod node: rebuild to the first ADD", map[string]samples{kindStickyIP: rebuilt}, 2)
	b.report.note(fmt.Sprintf("Workload 7: %d pods (%d addresses held); the store's first 32 KiB overwritten; 3 rounds. The daemon starts the same rebuild at its first pass after the damage (--interval, 5 s). "+
		"The recipe's figure is only the node's CNI calls (DELs 8 at a time): a drain adds the evictions, each pod's termination grace period (30 s by default) and its rescheduling elsewhere, and reservations are lost.",
		maxPods, len(held)))
	return nil
}

// rebuildNode ADDs the node's pods through the plugin and shows them to a
// rebuild: listed by cri, their CNI results in cacheDir.
func (b *bench) rebuildNode(t *target, cri *harness.FakeCRI, cacheDir string) ([]pod, map[string]bool, error) {
	held := map[string]bool{}
	var pods []pod
	for i := range maxPods {
		p := newPod("rebuild", i)
		if i%2 == 0 {
			p.annotations[reservationAnnotation] = "30"
		}
		if err := t.prepare(p); err != nil {
			return nil, nil, err
		}
		r := t.call("ADD", p)
		if r.err != nil {
			return nil, nil, r.err
		}
		sb := harness.FakeSandbox{ID: p.containerID, Namespace: p.namespace, Name: p.name, UID: p.uid,
			Annotations: maps.Clone(p.annotations), Netns: t.netnsPath(p)}
		for _, ip := range r.ips {
			sb.IPs = append(sb.IPs, ip.String()+"/24")
			held[ip.String()] = true
		}
		cri.Add(sb)
		if err := harness.WriteCNIResult(cacheDir, t.network, sb, harness.PodCNIArgs(p.namespace, p.name, p.uid, p.containerID)); err != nil {
			return nil, nil, err
		}
		pods = append(pods, p)
	}
	return pods, held, nil
}

// timeToFirstADD puts the pristine store back, overwrites its first 32 KiB
// and times repair, then ADDs of a new pod until one succeeds. When held
// is set, the new pod must not get one of its addresses.
func (b *bench) timeToFirstADD(t *target, pristine string, round int, held map[string]bool, repair func() error) (time.Duration, error) {
	if err := os.RemoveAll(t.dir); err != nil {
		return 0, err
	}
	if err := copyDir(pristine, t.dir); err != nil {
		return 0, err
	}
	if err := overwrite(filepath.Join(t.dir, "stickyip.db"), 32<<10); err != nil {
		return 0, err
	}
	p := newPod(fmt.Sprintf("first-%d-%t", round, held != nil), 0)
	if err := t.prepare(p); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := repair(); err != nil {
		return 0, err
	}
	for {
		r := t.call("ADD", p)
		if r.err == nil {
			d := time.Since(start)
			for _, ip := range r.ips {
				if held[ip.String()] {
					return 0, fmt.Errorf("the first new pod got %s, which a running pod holds", ip)
				}
			}
			return d, nil
		}
		if time.Since(start) > time.Minute {
			return 0, r.err
		}
	}
}

// rebuildStore runs checkpointd rebuild-store on the target's store.
func (b *bench) rebuildStore(t *target, root string) error {
	confDir := filepath.Join(root, "net.d")
	if err := writeConflist(t, confDir); err != nil {
		return err
	}
	cmd := exec.Command(b.cfg.checkpointdBin, "rebuild-store", "--data-dir", t.dir, "--cni-conf-dir", confDir,
		"--cri-endpoint", "unix://"+filepath.Join(root, "cri.sock"), "--cni-results-dir", filepath.Join(root, "results"),
		"--checkpoint-dir", filepath.Join(root, "checkpoints"), "--volume-dir", filepath.Join(root, "volumes"),
		"--node-name", "bench", "--log-level", "warn")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "IPAM store rebuilt") {
		return fmt.Errorf("checkpointd rebuild-store: %v: %s", err, out)
	}
	return nil
}

// writeConflist writes, in confDir, the conflist of t's network (bridge with
// t's ipam block), where checkpointd finds the store and the pool.
func writeConflist(t *target, confDir string) error {
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return err
	}
	list, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": t.network,
		"plugins": []any{map[string]any{"type": "bridge", "ipam": t.ipamConfig()}}})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(confDir, "10-bench.conflist"), list, 0o644)
}

// drainRecipe is the operator's recipe before rebuilds: the damaged store
// moved aside with its creation mark, then every pod's DEL (the drain), 8
// at a time.
func drainRecipe(t *target, pods []pod) error {
	db := filepath.Join(t.dir, "stickyip.db")
	if err := os.Rename(db, db+".damaged"); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(t.dir, "stickyip.created")); err != nil {
		return err
	}
	next := make(chan pod)
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for p := range next {
				if r := t.call("DEL", p); r.err != nil {
					errs <- r.err
				}
			}
		})
	}
	for _, p := range pods {
		next <- p
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// overwrite overwrites the first n bytes of path.
func overwrite(path string, n int) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", n)), 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyDir copies the regular files of src into a new dst.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
