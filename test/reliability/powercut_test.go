//go:build reliability

package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// journalName is the store's DEL journal (boltstore.JournalFile).
const journalName = "stickyip.journal"

// powerCutPod is one pod of a power-cut round and what was done to it.
type powerCutPod struct {
	name     string
	sticky   bool // a reservation annotation of stickyDuration
	ip       string
	deleted  bool
	delStart time.Time
	// committed: an ADD after the pod's DEL committed the journal to
	// the database (synced), so no power cut can lose the DEL.
	committed bool
}

// stickyDuration is the sticky pods' reservation (minutes).
const stickyDuration = 10 * time.Minute

// rebootedPlugin returns a plugin that runs as on the next boot: a boot ID
// and a boot time (now, rounded up to the next second) of their own, bound
// over /proc/sys/kernel/random/boot_id and /proc/stat in a mount namespace
// of each process. It returns the boot time.
func rebootedPlugin(t *testing.T, p *plugin, round int) (*plugin, time.Time) {
	t.Helper()
	dir := t.TempDir()
	boot := time.Now().Truncate(time.Second).Add(time.Second)
	bootID := filepath.Join(dir, "boot_id")
	stat := filepath.Join(dir, "stat")
	wrapper := filepath.Join(dir, "stickyip")
	for path, body := range map[string]string{
		bootID:  fmt.Sprintf("00000000-0000-4000-8000-%012d\n", round),
		stat:    fmt.Sprintf("btime %d\n", boot.Unix()),
		wrapper: fmt.Sprintf("#!/bin/sh\nexec unshare -m sh -c 'mount --bind %s /proc/sys/kernel/random/boot_id && mount --bind %s /proc/stat && exec \"$0\" \"$@\"' %s \"$@\"\n", bootID, stat, p.Path),
	} {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for time.Now().Before(boot) { // the boot is after every call of the old one
		time.Sleep(time.Until(boot))
	}
	return &plugin{Path: wrapper, Timeout: p.Timeout}, boot
}

// journalHistory is the journal file after each call of a round (nil: no
// file). The journal is never synced, not even when it is made, so at a
// power loss the disk may hold any of these states, and a different one in
// each sector, as the kernel wrote the pages back or not.
type journalHistory struct {
	path   string
	states [][]byte
}

// record keeps the journal as it is now.
func (h *journalHistory) record(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(h.path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	h.states = append(h.states, data)
}

// powerCuts are what a power loss leaves of the journal, one per round in
// turn, so every run exercises each of them and both outcomes of a DEL:
// kept whole (the DELs kept), as before the round's first call (every DEL
// since the last commit lost), as written back after a random call, and a
// sector of a random state in each 512 bytes, the file's size of another.
var powerCuts = []string{"kept whole", "lost", "written back after a random call", "torn: each sector of a random call"}

// cut leaves the journal as the power cut of this round does, and says
// which. Whole, the cut keeps every DEL; lost, it loses each DEL no commit
// holds (exact); the others may keep or lose any of those.
func (h *journalHistory) cut(t *testing.T, round int, rng *rand.Rand) (kind string, exact bool) {
	t.Helper()
	kind = powerCuts[round%len(powerCuts)]
	var data []byte
	switch round % len(powerCuts) {
	case 0:
		return kind, true
	case 1:
		exact = true
		data = h.states[0]
	case 2:
		data = h.states[rng.IntN(len(h.states))]
	case 3:
		size := len(h.states[rng.IntN(len(h.states))])
		data = make([]byte, size)
		for off := 0; off < size; off += 512 {
			from := h.states[rng.IntN(len(h.states))]
			if off < len(from) {
				copy(data[off:min(size, off+512)], from[off:])
			}
		}
	}
	if data == nil {
		if err := os.Remove(h.path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return kind, exact
	}
	if err := os.WriteFile(h.path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return kind, exact
}

// TestPowerCut: a DEL is not synced (it goes to the store's journal), so a
// power loss right after it may forget it. Each round ADDs pods (half with a
// reservation annotation), DELs some of them in random order with ADDs of
// new pods in between (each commits, synced, what the journal holds), then
// cuts the power: the journal is kept whole, lost, as written back after a
// random call, or torn (each sector of a random call), one of them per
// round in turn (powerCuts), as the page cache may have written it or not
// (the database file is only ever written by synced commits,
// TestDurabilitySync). The node
// boots (a new boot ID and boot time). Then the store must pass its check,
// and the first call of the new boot must leave every sticky pod's address
// reserved for it (a DEL kept: from the DEL; a DEL lost, or a pod never
// deleted: from the boot), every other pod's address free, nothing held
// twice; each sticky pod, re-created, gets its address back.
func TestPowerCut(t *testing.T) {
	requireRoot(t, "a mount namespace per call of the next boot (its boot ID)")
	p := newPlugin(t)
	rng := newRand(t)
	rounds := envInt(t, "RELIABILITY_POWERCUTS", 12)
	var f figures
	for round := range rounds {
		base := t.TempDir()
		dataDir := filepath.Join(base, "data")
		conf := netConf("cutnet", dataDir, filepath.Join(base, "plugin.log"))
		ns := goneNetns(t)
		call := func(pl *plugin, command, name, container string, sticky bool) *outcome {
			var anno map[string]string
			if sticky {
				anno = map[string]string{annoDuration: "10"}
			}
			return pl.CNI(cniCall{Command: command, ContainerID: container, Netns: ns, IfName: "eth0",
				Args: podArgs("cut", name, "uid-"+container, container), Stdin: encodeConf(t, withAnnotations(conf, anno))})
		}
		var pods []*powerCutPod
		add := func(pd *powerCutPod) {
			o := call(p, "ADD", pd.name, "c-"+pd.name, pd.sticky)
			if !o.OK() || o.Result == nil || len(o.Result.IPs) != 1 {
				t.Fatalf("round %d: ADD %s: %s", round, pd.name, o.Describe())
			}
			pd.ip = o.Result.Addrs()[0]
			for _, q := range pods {
				q.committed = q.deleted
			}
			pods = append(pods, pd)
		}
		history := &journalHistory{path: filepath.Join(dataDir, journalName)}
		history.record(t)
		for i := range 16 {
			add(&powerCutPod{name: fmt.Sprintf("p%d", i), sticky: i%2 == 0})
			history.record(t)
		}
		// Ten DELs in random order, the last a sticky pod's with no ADD
		// after it (an ADD commits the journal), so that a cut which keeps
		// the journal keeps a sticky DEL and one which loses it loses one.
		order := rng.Perm(len(pods))[:10]
		// (Ten of sixteen, eight not sticky, hold a sticky one.)
		last := slices.IndexFunc(order, func(i int) bool { return pods[i].sticky })
		order[last], order[len(order)-1] = order[len(order)-1], order[last]
		for n, i := range order {
			pd := pods[i]
			pd.delStart, pd.deleted = time.Now(), true
			if o := call(p, "DEL", pd.name, "c-"+pd.name, pd.sticky); !o.OK() {
				t.Fatalf("round %d: DEL %s: %s", round, pd.name, o.Describe())
			}
			history.record(t)
			f.add("DELs", 1)
			if n < len(order)-1 && rng.IntN(4) == 0 {
				add(&powerCutPod{name: fmt.Sprintf("n%d", len(pods)), sticky: rng.IntN(2) == 0})
				history.record(t)
			}
		}
		cut, exact := history.cut(t, round, rng)
		f.add("power cuts: journal "+cut, 1)
		p.RequireCheckOK(t, dataDir, fmt.Sprintf("round %d, after the power cut", round))

		rebooted, boot := rebootedPlugin(t, p, round)
		probe := &powerCutPod{name: "after-boot"}
		if o := call(rebooted, "ADD", probe.name, "c-"+probe.name, false); !o.OK() {
			t.Fatalf("round %d: first ADD of the new boot: %s", round, o.Describe())
		}
		es := p.Held(t, dataDir)
		if d := duplicateIPs(es); len(d) > 0 {
			t.Fatalf("round %d: IPs held twice after the boot: %v", round, d)
		}
		byIP := map[string]entry{}
		for _, e := range es {
			byIP[e.IP] = e
		}
		for _, pd := range pods {
			e, held := byIP[pd.ip]
			if !pd.sticky {
				if held {
					t.Errorf("round %d: %s (no reservation) still holds %s after the boot: %+v", round, pd.name, pd.ip, e)
				}
				continue
			}
			if !held || e.State != "reserved" || e.Name != pd.name || e.ExpiresAt == nil {
				t.Errorf("round %d: sticky %s's %s after the boot: %+v (held %v), want reserved for it", round, pd.name, pd.ip, e, held)
				continue
			}
			fromBoot := boot.Add(stickyDuration)
			// What the cut must have done to the pod's DEL: a committed one
			// is kept; so is every one when the journal is kept whole, and
			// none since the last commit when it is lost.
			mustKeep := pd.committed || exact && cut == powerCuts[0]
			mustLose := !pd.committed && exact && cut == powerCuts[1]
			switch exp := *e.ExpiresAt; {
			case !pd.deleted && exp.Equal(fromBoot):
				f.add("sticky pods never deleted, reserved from the boot", 1)
			case pd.deleted && exp.Equal(fromBoot) && !mustKeep:
				f.add("DELs lost to the cut, redone by the boot (reserved from the boot)", 1)
			case pd.deleted && !exp.Before(pd.delStart.Add(stickyDuration)) && exp.Before(fromBoot) && !mustLose:
				f.add("DELs kept through the cut (reserved from the DEL)", 1)
			default:
				fromDEL := fmt.Sprintf("10 minutes from its DEL at %s (the DEL kept)", pd.delStart.Format(time.RFC3339Nano))
				want := fmt.Sprintf("%s (from the boot: its DEL lost) or %s", fromBoot.Format(time.RFC3339), fromDEL)
				switch {
				case !pd.deleted:
					want = fromBoot.Format(time.RFC3339) + " (from the boot: never deleted)"
				case mustKeep:
					want = fromDEL
				case mustLose:
					want = fromBoot.Format(time.RFC3339) + " (from the boot: its DEL lost)"
				}
				t.Errorf("round %d (journal %s): %s (DEL committed: %v) reserved until %s; want %s",
					round, cut, pd.name, pd.committed, exp.Format(time.RFC3339Nano), want)
			}
		}
		for _, pd := range pods {
			if !pd.sticky {
				continue
			}
			o := call(rebooted, "ADD", pd.name, "c2-"+pd.name, true)
			if !o.OK() || o.Result == nil || !slices.Equal(o.Result.Addrs(), []string{pd.ip}) {
				t.Errorf("round %d: %s re-created after the boot: %s, want %s back", round, pd.name, o.Describe(), pd.ip)
			}
		}
		p.RequireCheckOK(t, dataDir, fmt.Sprintf("round %d, at the end", round))
		f.add("rounds", 1)
	}
	t.Logf("=== FIGURES (TestPowerCut)\n%s", f.String())
	if t.Failed() {
		return
	}
	for _, k := range []string{"DELs kept through the cut (reserved from the DEL)", "DELs lost to the cut, redone by the boot (reserved from the boot)"} {
		if f.get(k) == 0 && rounds >= 2 {
			t.Errorf("%s: none in %d rounds; the cuts do not exercise both outcomes", k, rounds)
		}
	}
}
