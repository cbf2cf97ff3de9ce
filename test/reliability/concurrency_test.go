//go:build reliability

package reliability

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// pod is one reservation identity (namespace/name/ifname) the concurrency
// suite drives, with the pod UIDs that may claim it.
type pod struct {
	Namespace, Name, IfName string
	Class                   string   // "private" (one worker), "shared" (all workers, one UID), "rival"/"rival-dead" (all workers, two UIDs)
	UIDs                    []string // pod UIDs that ADD under this identity
	Sticky                  bool     // ADDs carry a reservation duration
	Dead                    bool     // its sandboxes' netns is gone (holders count as dead)
}

func (p *pod) Identity() string { return p.Namespace + "/" + p.Name + "/" + p.IfName }

func (p *pod) annotations() map[string]string {
	a := map[string]string{"io.kubernetes.cri/some-other": "x"}
	if p.Sticky {
		a[annoDuration] = "60" // minutes
	}
	return a
}

// opRecord is one finished plugin call of the concurrency suite.
type opRecord struct {
	Worker     int
	Pod        *pod
	Command    string
	Container  string
	UID        string
	Start, End time.Time
	Out        *outcome
	Addrs      []string
}

// TestConcurrency runs N plugin processes at once doing a mixed stream of ADD
// and DEL on private, shared and contested identities, then checks the store.
func TestConcurrency(t *testing.T) {
	p := newPlugin(t)
	workers := envInt(t, "RELIABILITY_WORKERS", 16)
	opsPerWorker := envInt(t, "RELIABILITY_OPS_PER_WORKER", 200)
	if workers < 16 {
		t.Logf("note: %d workers (< 16) requested", workers)
	}
	rng := newRand(t)
	netns := newNetnsPool(t, 8)

	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	logFile := filepath.Join(base, "plugin.log")
	const network = "relnet"
	conf := netConf(network, dataDir, logFile, []string{"10.250.0.0/24"}, []string{"fd00:250::/120"})

	// Identities: 4 private per worker (every other one sticky, one on a
	// second interface), 8 shared sticky, 4 contested by two UIDs.
	var private [][]*pod
	var all []*pod
	for w := 0; w < workers; w++ {
		var mine []*pod
		for j := 0; j < 4; j++ {
			ifname := "eth0"
			if j == 3 {
				ifname = "net1"
			}
			pd := &pod{Namespace: "rel-private", Name: fmt.Sprintf("w%02d-p%d", w, j), IfName: ifname,
				Class: "private", UIDs: []string{fmt.Sprintf("uid-w%02d-p%d", w, j)}, Sticky: j%2 == 0}
			mine = append(mine, pd)
			all = append(all, pd)
		}
		private = append(private, mine)
	}
	var shared, rivals []*pod
	for k := 0; k < 8; k++ {
		pd := &pod{Namespace: "rel-shared", Name: fmt.Sprintf("s%d", k), IfName: "eth0", Class: "shared",
			UIDs: []string{fmt.Sprintf("uid-s%d", k)}, Sticky: true}
		shared = append(shared, pd)
		all = append(all, pd)
	}
	for k := 0; k < 4; k++ {
		pd := &pod{Namespace: "rel-rival", Name: fmt.Sprintf("r%d", k), IfName: "eth0", Class: "rival",
			UIDs: []string{fmt.Sprintf("uid-r%d-a", k), fmt.Sprintf("uid-r%d-b", k)}, Sticky: true}
		rivals = append(rivals, pd)
		all = append(all, pd)
	}
	// Contested identities whose sandboxes are dead (netns gone): the other
	// UID's ADD takes the address over instead of getting code 11.
	var deadRivals []*pod
	deadNetns := goneNetns(t)
	for k := 0; k < 2; k++ {
		pd := &pod{Namespace: "rel-rival-dead", Name: fmt.Sprintf("d%d", k), IfName: "eth0", Class: "rival-dead",
			UIDs: []string{fmt.Sprintf("uid-d%d-a", k), fmt.Sprintf("uid-d%d-b", k)}, Sticky: true, Dead: true}
		deadRivals = append(deadRivals, pd)
		all = append(all, pd)
	}

	var (
		mu      sync.Mutex
		records []*opRecord
	)
	call := func(w int, pd *pod, command, container, uid, nsPath string) *opRecord {
		c := cniCall{Command: command, ContainerID: container, Netns: nsPath, IfName: pd.IfName,
			Args:  podArgs(pd.Namespace, pd.Name, uid, container),
			Stdin: encodeConf(t, withAnnotations(conf, pd.annotations()))}
		r := &opRecord{Worker: w, Pod: pd, Command: command, Container: container, UID: uid, Start: time.Now()}
		r.Out = p.CNI(c)
		r.End = time.Now()
		if r.Out.Result != nil {
			r.Addrs = r.Out.Result.Addrs()
		}
		mu.Lock()
		records = append(records, r)
		mu.Unlock()
		return r
	}

	// Per worker: which container holds each private identity, and the
	// containers it created for shared/contested identities, oldest first.
	type held struct {
		container, uid, netns string
	}
	heldPrivate := make([]map[*pod]held, workers)
	heldOthers := make([]map[*pod][]held, workers)
	seeds := make([]uint64, workers)
	for w := range seeds {
		seeds[w] = rng.Uint64()
	}

	start := time.Now()
	stopOperator := make(chan struct{})
	operatorDone := make(chan struct{})
	opFig := &figures{}
	go func() { // the operator looks at and garbage-collects the store meanwhile
		defer close(operatorDone)
		for i := 0; ; i++ {
			select {
			case <-stopOperator:
				return
			default:
			}
			var o *outcome
			switch i % 3 {
			case 0:
				o = p.Tool("--data-dir", dataDir, "list", "--json")
				var es []entry
				if o.ExitCode == 0 {
					if err := json.Unmarshal(o.Stdout, &es); err != nil {
						opFig.add("operator list output not JSON", 1)
					}
					if d := duplicateIPs(es); len(d) > 0 {
						opFig.add("IPs held twice in a list during the run (must be 0)", len(d))
					}
				}
			case 1:
				o = p.Check(dataDir)
			case 2:
				o = p.Tool("--data-dir", dataDir, "gc") // nothing expired, every sandbox alive: a no-op
			}
			opFig.add("operator calls during the run", 1)
			if o.ExitCode != 0 || o.Panicked() {
				opFig.add("operator calls failed (must be 0)", 1)
				t.Errorf("operator call during the run failed: %s", o.Describe())
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		heldPrivate[w] = map[*pod]held{}
		heldOthers[w] = map[*pod][]held{}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := newWorkerRand(seeds[w])
			seq := 0
			newContainer := func(class string) string {
				seq++
				return fmt.Sprintf("w%02d-%s-%05d-%08x", w, class, seq, r.Uint32())
			}
			for i := 0; i < opsPerWorker; i++ {
				x := r.IntN(100)
				switch {
				case x < 50: // private identity: ADD when free, DEL when held
					pd := private[w][r.IntN(len(private[w]))]
					if h, ok := heldPrivate[w][pd]; ok {
						call(w, pd, "DEL", h.container, h.uid, h.netns)
						delete(heldPrivate[w], pd)
					} else {
						h := held{newContainer("p"), pd.UIDs[0], netns.Path(r.IntN(8))}
						if rec := call(w, pd, "ADD", h.container, h.uid, h.netns); rec.Out.OK() {
							heldPrivate[w][pd] = h
						}
					}
				default: // shared or contested identity
					pd := shared[r.IntN(len(shared))]
					if x >= 80 {
						pd = rivals[r.IntN(len(rivals))]
					}
					if x >= 92 {
						pd = deadRivals[r.IntN(len(deadRivals))]
					}
					mine := heldOthers[w][pd]
					if len(mine) > 0 && r.IntN(100) < 60 {
						h := mine[0]
						call(w, pd, "DEL", h.container, h.uid, h.netns)
						heldOthers[w][pd] = mine[1:]
					} else {
						h := held{newContainer(pd.Class), pd.UIDs[r.IntN(len(pd.UIDs))], netns.Path(r.IntN(8))}
						if pd.Dead {
							h.netns = deadNetns
						}
						call(w, pd, "ADD", h.container, h.uid, h.netns)
						// Kept even on failure: the runtime DELs a failed ADD too.
						heldOthers[w][pd] = append(mine, h)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopOperator)
	<-operatorDone

	f := &figures{}
	f.add("operator calls during the run", opFig.get("operator calls during the run"))
	f.add("operator calls failed (must be 0)", opFig.get("operator calls failed (must be 0)"))
	f.add("IPs held twice in a list during the run (must be 0)", opFig.get("IPs held twice in a list during the run (must be 0)"))
	if n := opFig.get("IPs held twice in a list during the run (must be 0)"); n > 0 {
		t.Errorf("operator list showed %d IPs held twice during the run", n)
	}
	if n := opFig.get("operator list output not JSON"); n > 0 {
		t.Errorf("%d operator list outputs during the run were not JSON", n)
	}
	var lat []time.Duration
	for _, r := range records {
		f.add("operations", 1)
		f.add("operations "+r.Command, 1)
		f.add(fmt.Sprintf("result %s %s", r.Command, r.Out.Kind()), 1)
		lat = append(lat, r.Out.Elapsed)
	}

	// 1. Every call ended cleanly; contested ADDs may get "try again later".
	unexpected := 0
	for _, r := range records {
		if r.Out.OK() {
			continue
		}
		if r.Pod.Class == "rival" && r.Command == "ADD" && r.Out.Err != nil && r.Out.Err.Code == 11 {
			continue
		}
		unexpected++
		if unexpected <= 10 {
			t.Errorf("unexpected failure: %s %s %s container=%s uid=%s: %s (err=%v)",
				r.Command, r.Pod.Class, r.Pod.Identity(), r.Container, r.UID, r.Out.Describe(), r.Out.Err)
		}
	}
	f.add("unexpected failures (must be 0)", unexpected)

	// 2. Each successful ADD returns one IPv4 and one IPv6 address; a sticky
	// identity always gets the same pair.
	stickyAddrs := map[*pod][]string{}
	stickyViolations := 0
	for _, r := range sortedByEnd(records) {
		if r.Command != "ADD" || !r.Out.OK() {
			continue
		}
		if len(r.Addrs) != 2 || !strings.HasPrefix(r.Addrs[0], "10.250.0.") || !strings.HasPrefix(r.Addrs[1], "fd00:250::") {
			t.Errorf("ADD %s returned %v, want one address from 10.250.0.0/24 and one from fd00:250::/120", r.Pod.Identity(), r.Addrs)
			continue
		}
		if !r.Pod.Sticky {
			continue
		}
		if prev, ok := stickyAddrs[r.Pod]; !ok {
			stickyAddrs[r.Pod] = r.Addrs
		} else if !slices.Equal(prev, r.Addrs) {
			stickyViolations++
			t.Errorf("sticky identity %s got %v, earlier %v (container %s)", r.Pod.Identity(), r.Addrs, prev, r.Container)
		}
	}
	f.add("sticky IP changes (must be 0)", stickyViolations)

	// 3. No address held by two identities at overlapping times.
	dups := overlappingHolders(records, start.Add(24*time.Hour), func(pd *pod) bool { return pd.Sticky })
	for i, d := range dups {
		if i < 10 {
			t.Errorf("duplicate: %s", d)
		}
	}
	f.add("duplicate holders over time (must be 0)", len(dups))

	// 4. The store as the operator sees it, mid-flight (pods still running).
	p.RequireCheckOK(t, dataDir, "after the concurrent run")
	entries := p.Held(t, dataDir)
	listDups := duplicateIPs(entries)
	for k, v := range listDups {
		t.Errorf("IP held twice in list: %s by %v", k, v)
	}
	f.add("IPs held twice in list (must be 0)", len(listDups))
	byIdentity := map[string][]entry{}
	for _, e := range entries {
		byIdentity[identityOf(e)] = append(byIdentity[identityOf(e)], e)
	}
	lost := 0
	for w := 0; w < workers; w++ {
		for _, pd := range private[w] {
			es := byIdentity[pd.Identity()]
			if h, ok := heldPrivate[w][pd]; ok {
				want := lastAddAddrs(records, h.container)
				if !entriesAre(es, "allocated", h.container, want) {
					lost++
					t.Errorf("%s held by %s with %v: list shows %v", pd.Identity(), h.container, want, es)
				}
			} else if pd.Sticky && stickyAddrs[pd] != nil {
				if !entriesAre(es, "reserved", "", stickyAddrs[pd]) {
					lost++
					t.Errorf("%s deleted with a reservation of %v: list shows %v", pd.Identity(), stickyAddrs[pd], es)
				}
			} else if len(es) != 0 {
				lost++
				t.Errorf("%s deleted without reservation: list still shows %v", pd.Identity(), es)
			}
		}
	}
	for _, pd := range slices.Concat(shared, rivals, deadRivals) {
		es := byIdentity[pd.Identity()]
		if stickyAddrs[pd] == nil {
			continue
		}
		if !sameAddrs(es, stickyAddrs[pd]) {
			lost++
			t.Errorf("%s: list shows %v, want its addresses %v", pd.Identity(), es, stickyAddrs[pd])
		}
	}
	known := map[string]bool{}
	for _, pd := range all {
		known[pd.Identity()] = true
	}
	for id, es := range byIdentity {
		if !known[id] {
			lost++
			t.Errorf("list shows an identity no test pod has: %v", es)
		}
	}

	// 5. The runtime deletes every remaining sandbox: every sticky identity
	// ends reserved with its address, nothing else remains.
	for w := 0; w < workers; w++ {
		for pd, h := range heldPrivate[w] {
			if r := call(w, pd, "DEL", h.container, h.uid, h.netns); !r.Out.OK() {
				t.Errorf("final DEL %s: %s", h.container, r.Out.Describe())
			}
		}
		for pd, hs := range heldOthers[w] {
			for _, h := range hs {
				if r := call(w, pd, "DEL", h.container, h.uid, h.netns); !r.Out.OK() {
					t.Errorf("final DEL %s: %s", h.container, r.Out.Describe())
				}
			}
		}
	}
	p.RequireCheckOK(t, dataDir, "after deleting every sandbox")
	entries = p.Held(t, dataDir)
	byIdentity = map[string][]entry{}
	for _, e := range entries {
		byIdentity[identityOf(e)] = append(byIdentity[identityOf(e)], e)
	}
	for _, pd := range all {
		es := byIdentity[pd.Identity()]
		want := stickyAddrs[pd]
		if want == nil {
			if len(es) != 0 {
				lost++
				t.Errorf("after all DELs, %s (no reservation) still holds %v", pd.Identity(), es)
			}
			continue
		}
		if !entriesAre(es, "reserved", "", want) {
			lost++
			t.Errorf("after all DELs, %s should be reserved with %v: list shows %v", pd.Identity(), want, es)
		}
	}
	f.add("allocations lost or leaked (must be 0)", lost)

	// 6. The operator releases every reservation: the store ends empty.
	for _, pd := range all {
		if stickyAddrs[pd] == nil {
			continue
		}
		o := p.Tool("--data-dir", dataDir, "release", pd.Namespace+"/"+pd.Name, "--network", network, "--ifname", pd.IfName)
		if o.ExitCode != 0 {
			t.Errorf("release %s: %s", pd.Identity(), o.Describe())
		}
	}
	if es := p.Held(t, dataDir); len(es) != 0 {
		t.Errorf("after releasing every reservation the store still holds %d entries: %v", len(es), es)
		f.add("entries left after release (must be 0)", len(es))
	}
	p.RequireCheckOK(t, dataDir, "after releasing everything")

	report(t, "concurrency", f,
		fmt.Sprintf("workers %d, identities %d, wall %v, %.0f ops/s", workers, len(all), elapsed.Round(time.Millisecond), float64(len(records))/elapsed.Seconds()),
		fmt.Sprintf("latency p50 %v p99 %v max %v", percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond), percentile(lat, 100).Round(time.Millisecond)))
	if f.get("operations") < 3000 && opsPerWorker >= 200 {
		t.Errorf("only %d operations ran, want thousands", f.get("operations"))
	}
}

func sortedByEnd(rs []*opRecord) []*opRecord {
	out := slices.Clone(rs)
	sort.Slice(out, func(i, j int) bool { return out[i].End.Before(out[j].End) })
	return out
}

// lastAddAddrs returns the addresses the last successful ADD of container got.
func lastAddAddrs(rs []*opRecord, container string) []string {
	var addrs []string
	var end time.Time
	for _, r := range rs {
		if r.Container == container && r.Command == "ADD" && r.Out.OK() && r.End.After(end) {
			addrs, end = r.Addrs, r.End
		}
	}
	return addrs
}

// entriesAre reports whether es is exactly one entry per address in want,
// all in state (and, when container is set, held by it).
func entriesAre(es []entry, state, container string, want []string) bool {
	if !sameAddrs(es, want) {
		return false
	}
	for _, e := range es {
		if e.State != state || (container != "" && e.ContainerID != container) {
			return false
		}
	}
	return true
}

func sameAddrs(es []entry, want []string) bool {
	var got []string
	for _, e := range es {
		got = append(got, e.IP)
	}
	sort.Strings(got)
	return slices.Equal(got, want)
}

// holding is the time during which an identity certainly held an address.
type holding struct {
	identity, container string
	from, to            time.Time
}

// overlappingHolders finds addresses that two different identities held at
// the same time. An identity for which keeps is true holds its address from
// its first ADD to the end (its reservation outlives the test); otherwise from
// the end of the ADD to the start of the container's DEL.
func overlappingHolders(rs []*opRecord, forever time.Time, keeps func(*pod) bool) []string {
	byAddr := map[string][]holding{}
	delStart := map[string]time.Time{}
	for _, r := range rs {
		if r.Command == "DEL" && r.Out.OK() {
			if s, ok := delStart[r.Container]; !ok || r.Start.Before(s) {
				delStart[r.Container] = r.Start
			}
		}
	}
	for _, r := range rs {
		if r.Command != "ADD" || !r.Out.OK() {
			continue
		}
		to := forever
		if s, ok := delStart[r.Container]; ok && !keeps(r.Pod) {
			to = s
		}
		for _, a := range r.Addrs {
			byAddr[a] = append(byAddr[a], holding{r.Pod.Identity(), r.Container, r.End, to})
		}
	}
	var out []string
	for a, hs := range byAddr {
		for i := range hs {
			for j := i + 1; j < len(hs); j++ {
				x, y := hs[i], hs[j]
				if x.identity == y.identity {
					continue
				}
				if x.from.Before(y.to) && y.from.Before(x.to) {
					out = append(out, fmt.Sprintf("%s held by %s (%s) and %s (%s) at the same time", a, x.identity, x.container, y.identity, y.container))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
