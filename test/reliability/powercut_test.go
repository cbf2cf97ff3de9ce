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

// cutJournal does to the journal what a power loss may: keep it whole, lose
// it, keep it up to a byte, or lose one of its pages. It says which.
func cutJournal(t *testing.T, path string, rng *rand.Rand) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return "empty (the last call an ADD, which committed it)"
	}
	switch rng.IntN(4) {
	case 0:
		return "kept whole"
	case 1:
		data = nil
	case 2:
		data = data[:rng.IntN(len(data))]
	case 3:
		page := rng.IntN((len(data) + 4095) / 4096)
		clear(data[page*4096 : min(len(data), (page+1)*4096)])
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return "cut"
}

// TestPowerCut: a DEL is not synced (it goes to the store's journal), so a
// power loss right after it may forget it. Each round ADDs pods (half with a
// reservation annotation), DELs some of them in random order with ADDs of
// new pods in between (each commits, synced, what the journal holds), then
// cuts the power: the journal is kept, lost, cut at a random byte or loses
// a page, as the page cache may have written it or not (the database file
// is only ever written by synced commits, TestDurabilitySync). The node
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
			pods = append(pods, pd)
		}
		for i := range 16 {
			add(&powerCutPod{name: fmt.Sprintf("p%d", i), sticky: i%2 == 0})
		}
		order := rng.Perm(len(pods))
		for _, i := range order[:10] {
			pd := pods[i]
			pd.delStart, pd.deleted = time.Now(), true
			if o := call(p, "DEL", pd.name, "c-"+pd.name, pd.sticky); !o.OK() {
				t.Fatalf("round %d: DEL %s: %s", round, pd.name, o.Describe())
			}
			f.add("DELs", 1)
			if rng.IntN(4) == 0 {
				add(&powerCutPod{name: fmt.Sprintf("n%d", len(pods)), sticky: rng.IntN(2) == 0})
			}
		}
		f.add("power cuts: journal "+cutJournal(t, filepath.Join(dataDir, journalName), rng), 1)
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
			switch exp := *e.ExpiresAt; {
			case !pd.deleted && exp.Equal(fromBoot):
				f.add("sticky pods never deleted, reserved from the boot", 1)
			case pd.deleted && exp.Equal(fromBoot):
				f.add("DELs lost to the cut, redone by the boot (reserved from the boot)", 1)
			case pd.deleted && !exp.Before(pd.delStart.Add(stickyDuration)) && exp.Before(fromBoot):
				f.add("DELs kept through the cut (reserved from the DEL)", 1)
			default:
				t.Errorf("round %d: %s reserved until %s; want %s (from the boot) or, deleted at %s, from its DEL",
					round, pd.name, exp.Format(time.RFC3339Nano), fromBoot.Format(time.RFC3339), pd.delStart.Format(time.RFC3339Nano))
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
		if f.get(k) == 0 && rounds >= 12 {
			t.Errorf("%s: none in %d rounds; the cuts do not exercise both outcomes", k, rounds)
		}
	}
}
