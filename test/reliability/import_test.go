//go:build reliability

package reliability

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"
)

// hostLocalDir writes host-local's data for network into a fresh directory:
// one file per address holding "containerID\r\nifname", plus host-local's
// lock and last_reserved_ip files. It returns the parent directory (what
// hostLocalDataDir names) and the addresses.
func hostLocalDir(t *testing.T, network string, n int) (string, map[string]string) {
	t.Helper()
	parent := filepath.Join(t.TempDir(), "networks")
	dir := filepath.Join(parent, network)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("10.250.4.%d", 2+i)
		id := fmt.Sprintf("hl-%03d", i)
		if err := os.WriteFile(filepath.Join(dir, ip), []byte(id+"\r\neth0"), 0o644); err != nil {
			t.Fatal(err)
		}
		ips[ip] = id
	}
	for name, content := range map[string]string{"lock": "", "last_reserved_ip.0": fmt.Sprintf("10.250.4.%d", 1+n)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return parent, ips
}

// dirState hashes every file of a directory, to prove it was not changed.
func dirState(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		out[e.Name()] = statFile(t, filepath.Join(dir, e.Name()))
	}
	return out
}

// TestHostLocalImport switches a "live node" from host-local: 200 running
// pods are recorded only in host-local's directory. The first stickyip calls
// import them; kills during that import and 16 concurrent first calls must
// never hand out an imported address, import every one exactly once, and
// leave host-local's files alone.
func TestHostLocalImport(t *testing.T) {
	p := newPlugin(t)
	rng := newRand(t)
	const network, pods = "impnet", 200
	hlParent, imported := hostLocalDir(t, network, pods)
	hlBefore := dirState(t, filepath.Join(hlParent, network))
	base := t.TempDir()
	f := &figures{}
	f.add("inconsistencies (must be 0)", 0)
	inconsistent := func(format string, a ...any) {
		f.add("inconsistencies (must be 0)", 1)
		if f.get("inconsistencies (must be 0)") <= 10 {
			t.Errorf(format, a...)
		}
	}
	confFor := func(dataDir string) []byte {
		conf := netConf(network, dataDir, filepath.Join(base, "plugin.log"), []string{"10.250.4.0/22"})
		ipamOf(conf)["hostLocalDataDir"] = hlParent
		return encodeConf(t, conf)
	}
	live := newNetnsPool(t, 1).Path(0)
	addCall := func(dataDir, name string) cniCall {
		c := "c-" + name
		return cniCall{Command: "ADD", ContainerID: c, Netns: live, IfName: "eth0",
			Args: podArgs("default", name, "uid-"+name, c), Stdin: confFor(dataDir)}
	}
	// verify checks one store after its first calls: every host-local address
	// recorded for its container, the new pods elsewhere, nothing twice.
	verify := func(dataDir string, newPods map[string][]string) {
		if o := p.Check(dataDir); o.ExitCode != 0 {
			inconsistent("check after import: %s", o.Describe())
		}
		es := p.List(t, dataDir)
		if d := duplicateIPs(es); len(d) > 0 {
			inconsistent("IPs held twice after import: %v", d)
		}
		seen := map[string]bool{}
		for _, e := range es {
			if id, ok := imported[e.IP]; ok {
				if e.ContainerID != id || e.State != "allocated" {
					inconsistent("%s: want allocated to host-local's %s, store lists %s %s", e.IP, id, e.State, e.ContainerID)
				}
				seen[e.IP] = true
			}
		}
		if len(seen) != pods {
			inconsistent("%d of %d host-local allocations imported", len(seen), pods)
		}
		for name, addrs := range newPods {
			for _, a := range addrs {
				if _, clash := imported[a]; clash {
					inconsistent("new pod %s got %s, which host-local's %s still holds", name, a, imported[a])
				}
			}
		}
		if want := pods + len(newPods); len(es) != want {
			inconsistent("store lists %d entries, want %d", len(es), want)
		}
	}

	// Calibrate: how long does a first call with the import take?
	var durations []time.Duration
	for i := 0; i < 3; i++ {
		dataDir := filepath.Join(base, fmt.Sprintf("cal-%d", i))
		o := p.CNI(addCall(dataDir, "first"))
		if !o.OK() {
			t.Fatalf("first ADD with import: %s", o.Describe())
		}
		durations = append(durations, o.Elapsed)
		verify(dataDir, map[string][]string{"first": o.Result.Addrs()})
	}
	window := percentile(durations, 100)
	t.Logf("a first ADD importing %d allocations takes up to %v", pods, window)

	t.Run("kills during the import", func(t *testing.T) {
		for i := 0; i < 25; i++ {
			dataDir := filepath.Join(base, fmt.Sprintf("kill-%02d", i))
			c := addCall(dataDir, "first")
			_, killed := killAfter(p, c, time.Duration(rng.Int64N(int64(window)+1)))
			if killed {
				f.add("kills during the first ADD (import)", 1)
			}
			if o := p.Check(dataDir); o.ExitCode != 0 {
				inconsistent("round %d: check after the kill: %s", i, o.Describe())
			}
			o := p.CNI(c)
			if !o.OK() {
				inconsistent("round %d: retried first ADD: %s", i, o.Describe())
				continue
			}
			verify(dataDir, map[string][]string{"first": o.Result.Addrs()})
		}
	})

	t.Run("16 concurrent first calls", func(t *testing.T) {
		dataDir := filepath.Join(base, "concurrent")
		var mu sync.Mutex
		got := map[string][]string{}
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				name := fmt.Sprintf("new%02d", w)
				o := p.CNI(addCall(dataDir, name))
				mu.Lock()
				defer mu.Unlock()
				if !o.OK() {
					inconsistent("concurrent first ADD %s: %s", name, o.Describe())
					return
				}
				got[name] = o.Result.Addrs()
			}(w)
		}
		wg.Wait()
		var all []string
		for _, a := range got {
			all = append(all, a...)
		}
		sort.Strings(all)
		for i := 1; i < len(all); i++ {
			if all[i] == all[i-1] {
				inconsistent("two concurrent first ADDs got %s", all[i])
			}
		}
		verify(dataDir, got)
	})

	hlAfter := dirState(t, filepath.Join(hlParent, network))
	for name, st := range hlBefore {
		if hlAfter[name] != st {
			inconsistent("host-local's %s changed: %v -> %v", name, st, hlAfter[name])
		}
	}
	if len(hlAfter) != len(hlBefore) {
		inconsistent("host-local's directory had %d files, now %d", len(hlBefore), len(hlAfter))
	}
	report(t, "host-local import", f, fmt.Sprintf("%d host-local allocations; first ADD with import up to %v", pods, window.Round(time.Millisecond)))
}
