// Package admin is the operator tool: the stickyip binary run from a shell
// (no CNI_COMMAND). It works on the same store as the plugin, through the same
// lock, so it is safe to use while pods are being created.
package admin

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

const usage = `stickyip — operator tool for the stickyip IPAM store

Usage:
  stickyip [--data-dir DIR] list [--network NAME] [--json]
  stickyip [--data-dir DIR] release NAMESPACE/NAME [--network NAME] [--ifname IF]
  stickyip [--data-dir DIR] gc [--cni-conf-dir DIR] [--network NAME]
  stickyip [--data-dir DIR] import --network NAME [--from DIR]
  stickyip [--data-dir DIR] check [--cni-conf-dir DIR] [--json]
  stickyip status [--cni-conf-dir DIR] [--network NAME] [--json]
  stickyip version

--data-dir defaults to $STICKYIP_DATA_DIR, else ` + contract.DefaultDataDir + `.
Exit codes: 0 ok, 1 problems found or nothing to do, 2 error.
`

// Entry is one line of "list --json".
type Entry struct {
	Network           string     `json:"network"`
	IP                string     `json:"ip"`
	State             string     `json:"state"`
	ContainerID       string     `json:"containerID,omitempty"`
	IfName            string     `json:"ifname,omitempty"`
	Namespace         string     `json:"namespace,omitempty"`
	Name              string     `json:"name,omitempty"`
	UID               string     `json:"uid,omitempty"`
	Netns             string     `json:"netns,omitempty"`
	Duration          string     `json:"duration,omitempty"`
	RequestedDuration string     `json:"requestedDuration,omitempty"`
	Clamped           bool       `json:"clamped"`
	Imported          bool       `json:"imported,omitempty"`
	AllocatedAt       time.Time  `json:"allocatedAt"`
	ExpiresAt         *time.Time `json:"expiresAt,omitempty"`
	LastContainerID   string     `json:"lastContainerID,omitempty"`
	// LastPod is namespace/name of the last holder of a cooling address:
	// until the cooling ends only that pod may ask for it.
	LastPod string `json:"lastPod,omitempty"`
}

type tool struct {
	stdout, stderr io.Writer
	dataDir        string
}

// printJSON prints v as indented JSON (the --json form of every command).
func (t *tool) printJSON(v any) error {
	enc := json.NewEncoder(t.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Run runs the operator tool with args (without the program name) and returns
// the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	t := &tool{stdout: stdout, stderr: stderr}
	global := flag.NewFlagSet("stickyip", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	defDir := os.Getenv("STICKYIP_DATA_DIR")
	if defDir == "" {
		defDir = contract.DefaultDataDir
	}
	global.StringVar(&t.dataDir, "data-dir", defDir, "stickyip data directory")
	if err := global.Parse(args); err != nil {
		return 2
	}
	rest := global.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func([]string) error{
		"list": t.list, "release": t.release, "gc": t.gc, "import": t.importCmd, "version": t.version, "status": t.status,
	}
	switch rest[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "check":
		return t.check(rest[1:])
	}
	fn, ok := cmds[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "stickyip: unknown command %q\n\n%s", rest[0], usage)
		return 2
	}
	if err := fn(rest[1:]); err != nil {
		if errors.Is(err, errNothing) {
			return 1
		}
		fmt.Fprintf(stderr, "stickyip %s: %v\n", rest[0], err)
		if hint := hintFor(err, t.dataDir); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		return 2
	}
	return 0
}

var errNothing = errors.New("nothing to do")

// flags returns a flag set for a subcommand that also accepts --data-dir.
func (t *tool) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("stickyip "+name, flag.ContinueOnError)
	fs.SetOutput(t.stderr)
	fs.StringVar(&t.dataDir, "data-dir", t.dataDir, "stickyip data directory")
	return fs
}

// parse parses flags placed before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func (t *tool) store() *boltstore.Store { return boltstore.New(t.dataDir, 0) }

func (t *tool) networks(only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	return t.store().Networks()
}

func (t *tool) list(args []string) error {
	fs := t.flags("list")
	network := fs.String("network", "", "only this network")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	nets, err := t.networks(*network)
	if err != nil {
		return err
	}
	entries := []Entry{}
	for _, n := range nets {
		err := t.store().View(n, func(tx reservation.Txn) error {
			return tx.ForEach(func(r *reservation.Record) error {
				entries = append(entries, entryOf(n, r))
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	if *asJSON {
		return t.printJSON(entries)
	}
	w := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NETWORK\tIP\tSTATE\tPOD\tIFNAME\tCONTAINER\tKEEP\tEXPIRES")
	now := time.Now()
	for _, e := range entries {
		pod := "-"
		if e.Name != "" {
			pod = e.Namespace + "/" + e.Name
		} else if e.LastPod != "" {
			pod = "(was " + e.LastPod + ")"
		}
		keep := orDash(e.Duration)
		if e.Clamped {
			keep += " (clamped from " + e.RequestedDuration + ")"
		}
		expires := "-"
		if e.ExpiresAt != nil {
			expires = fmt.Sprintf("%s (in %s)", e.ExpiresAt.Local().Format(time.RFC3339), e.ExpiresAt.Sub(now).Round(time.Second))
		}
		cid := e.ContainerID
		if len(cid) > 12 {
			cid = cid[:12]
		}
		if e.Imported {
			cid += " (host-local)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Network, e.IP, e.State, pod, orDash(e.IfName), orDash(cid), keep, expires)
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func entryOf(network string, r *reservation.Record) Entry {
	e := Entry{
		Network: network, IP: r.IP.String(), State: string(r.State), ContainerID: r.ContainerID,
		IfName: r.IfName, Namespace: r.Identity.Namespace, Name: r.Identity.Name, UID: r.UID, Netns: r.Netns,
		Clamped: r.Clamped, Imported: r.Imported, AllocatedAt: r.AllocatedAt, LastContainerID: r.LastContainerID,
	}
	if r.Identity.IfName != "" {
		e.IfName = r.Identity.IfName
	}
	if !r.LastIdentity.IsZero() {
		e.LastPod = r.LastIdentity.Pod()
	}
	if r.Duration > 0 {
		e.Duration = r.Duration.String()
	}
	if r.RequestedDuration > 0 {
		e.RequestedDuration = r.RequestedDuration.String()
	}
	if r.Timed() {
		at := r.ExpiresAt
		e.ExpiresAt = &at
	}
	return e
}

func (t *tool) release(args []string) error {
	fs := t.flags("release")
	network := fs.String("network", "", "only this network")
	ifname := fs.String("ifname", "", "only this interface")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want exactly one NAMESPACE/NAME")
	}
	ns, name, ok := strings.Cut(pos[0], "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("%q is not NAMESPACE/NAME", pos[0])
	}
	nets, err := t.networks(*network)
	if err != nil {
		return err
	}
	found := 0
	for _, n := range nets {
		err := t.store().Update(n, func(tx reservation.Txn) error {
			done, err := ipam.ReleasePod(tx, ns, name, *ifname, slog.New(slog.DiscardHandler))
			if err != nil {
				return err
			}
			for _, r := range done {
				found++
				if r.Dropped {
					fmt.Fprintf(t.stdout, "%s: released %s (reserved for %s/%s until %s)\n", n, r.IP, ns, name, r.ExpiresAt.Format(time.RFC3339))
				} else {
					fmt.Fprintf(t.stdout, "%s: %s is in use by container %s; it will be freed, not reserved, when that sandbox is deleted\n", n, r.IP, r.ContainerID)
				}
			}
			if len(done) == 0 {
				return reservation.ErrNoChange
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if found == 0 {
		fmt.Fprintf(t.stdout, "nothing recorded for %s/%s\n", ns, name)
	}
	return nil
}

// gc releases the allocations whose sandbox is gone and drops what expired,
// in every network of the store, each by the rules of its own config (found
// as `stickyip status` finds it). A network without one is skipped, named on
// stderr: releasing its addresses with other rules (no reuse delay, no
// host-local import) could hand an address out too early.
func (t *tool) gc(args []string) error {
	fs := t.flags("gc")
	confDir := fs.String("cni-conf-dir", contract.DefaultCNIConfDir, "CNI network configs to read each network's rules from")
	network := fs.String("network", "", "only this network")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	nets, err := t.networks(*network)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, n := range nets {
		e, err := ipam.NetworkEngine(*confDir, n, t.dataDir, ipam.HostEnv(log))
		if err != nil {
			if *network != "" {
				return err
			}
			fmt.Fprintf(t.stderr, "stickyip gc: %s: skipped, nothing changed: %v\n", n, err)
			continue
		}
		var dead, expired int
		err = t.store().Update(n, func(tx reservation.Txn) (err error) {
			expired, dead, err = e.Sweep(tx)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(t.stdout, "%s: released %d allocations whose sandbox is gone, dropped %d expired reservations and cooling periods\n", n, dead, expired)
	}
	return nil
}

func (t *tool) importCmd(args []string) error {
	fs := t.flags("import")
	network := fs.String("network", "", "network name (required)")
	from := fs.String("from", "", "host-local data directory of the network (default "+contract.DefaultHostLocalDataDir+"/NETWORK)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *network == "" {
		return fmt.Errorf("--network is required")
	}
	dir := *from
	if dir == "" {
		dir = filepath.Join(contract.DefaultHostLocalDataDir, *network)
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(t.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := ipam.HostEnv(log)
	var n int
	err := t.store().Update(*network, func(tx reservation.Txn) (err error) {
		n, err = ipam.ImportHostLocal(tx, dir, nil, env.BootID, time.Now(), log)
		if err != nil {
			return err
		}
		return ipam.MarkImported(tx, time.Now(), n)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(t.stdout, "%s: imported %d allocations from %s\n", *network, n, dir)
	return nil
}

func (t *tool) check(args []string) int {
	fs := t.flags("check")
	asJSON := fs.Bool("json", false, "print JSON")
	confDir := fs.String("cni-conf-dir", "/etc/cni/net.d", "CNI network configs to read each network's ranges from")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	st := t.store()
	problems, err := st.Check()
	if err == nil {
		problems = append(problems, t.checkRanges(*confDir)...)
	}
	if *asJSON {
		out := map[string]any{"path": st.Path(), "ok": err == nil && len(problems) == 0, "problems": problems}
		if err != nil {
			out["error"] = err.Error()
			out["hint"] = hintFor(err, t.dataDir)
		}
		_ = t.printJSON(out)
	} else {
		switch {
		case err != nil:
			fmt.Fprintf(t.stdout, "%s: cannot be read: %v\n%s\n", st.Path(), err, hintFor(err, t.dataDir))
		case len(problems) == 0:
			fmt.Fprintf(t.stdout, "%s: ok\n", st.Path())
		default:
			fmt.Fprintf(t.stdout, "%s: %d problems:\n", st.Path(), len(problems))
			for _, p := range problems {
				fmt.Fprintln(t.stdout, "  "+p)
			}
		}
	}
	switch {
	case err != nil:
		return 2
	case len(problems) > 0:
		return 1
	}
	return 0
}

// checkRanges reports the records of this data directory's networks that sit
// on an address no pod may hold (a range's gateway, network or broadcast
// address), reading the ranges from the CNI configs as status does.
// Networks without a config here are not checked (the store does not keep
// ranges); configs that do not parse are named on stderr.
func (t *tool) checkRanges(confDir string) []string {
	confs, skipped, err := ipam.StickyipNetworks(confDir)
	if err != nil {
		fmt.Fprintf(t.stderr, "stickyip check: ranges not checked: %v\n", err)
		return nil
	}
	for _, p := range skipped {
		fmt.Fprintln(t.stderr, "stickyip check: skipped:", p)
	}
	var problems []string
	for _, n := range slices.Sorted(maps.Keys(confs)) {
		c := confs[n]
		if filepath.Clean(c.DataDir) != filepath.Clean(t.dataDir) {
			continue
		}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		var found []string
		err := t.store().View(n, func(tx reservation.Txn) (err error) {
			found, err = e.UnassignableRecords(tx)
			return err
		})
		if err != nil {
			found = []string{err.Error()}
		}
		for _, f := range found {
			problems = append(problems, fmt.Sprintf("network %s (%s): %s", n, c.File, f))
		}
	}
	return problems
}

// PoolStatus is one network of "status --json".
type PoolStatus struct {
	Network string `json:"network"`
	DataDir string `json:"dataDir"`
	// ConfigFile is the CNI config the network's ranges come from.
	ConfigFile string            `json:"configFile,omitempty"`
	Sets       []ipam.SetSummary `json:"rangeSets"`
	// Outside counts records in no configured range (the ranges changed).
	Outside int `json:"outside,omitempty"`
	// NodeRanges are the Node's pod CIDRs as checkpointd recorded them
	// (absent without checkpointd): a retired one is no longer the node's.
	NodeRanges *ipam.NodeRanges `json:"nodeRanges,omitempty"`
}

// status prints how full each stickyip network's range sets are. The ranges
// come from the CNI configs (the store does not keep them), the records from
// each network's own data directory.
func (t *tool) status(args []string) error {
	fs := t.flags("status")
	confDir := fs.String("cni-conf-dir", contract.DefaultCNIConfDir, "CNI network configs to read the ranges from")
	network := fs.String("network", "", "only this network")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	confs, problems, err := ipam.StickyipNetworks(*confDir)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(t.stderr, "stickyip status: skipped:", p)
	}
	names := slices.Sorted(maps.Keys(confs))
	if *network != "" {
		if _, ok := confs[*network]; !ok {
			return fmt.Errorf("no stickyip network %q in %s", *network, *confDir)
		}
		names = []string{*network}
	}
	out := []PoolStatus{}
	now := time.Now()
	for _, n := range names {
		c := confs[n]
		st := PoolStatus{Network: n, DataDir: c.DataDir, ConfigFile: c.File}
		e := ipam.NewEngine(c.Config, ipam.Env{})
		err := boltstore.New(c.DataDir, 0).View(n, func(tx reservation.Txn) (err error) {
			if st.Sets, st.Outside, err = e.Summary(tx, now); err != nil {
				return err
			}
			nr, err := ipam.ReadNodeRanges(tx)
			if len(nr.Current) > 0 {
				st.NodeRanges = &nr
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("network %s: %w", n, err)
		}
		out = append(out, st)
	}
	if *asJSON {
		return t.printJSON(out)
	}
	w := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NETWORK\tSET\tRANGES\tSIZE\tALLOCATED\tRESERVED\tCOOLING\tFREE")
	for _, p := range out {
		for _, s := range p.Sets {
			fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", p.Network, s.RangeSet, s.Ranges, s.Size, s.Allocated, s.Reserved, s.Cooling, s.Free)
		}
		if p.Outside > 0 {
			fmt.Fprintf(w, "%s\t-\toutside the configured ranges\t-\t%d records\t\t\t\n", p.Network, p.Outside)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, p := range out {
		if p.NodeRanges != nil && len(p.NodeRanges.Retired) > 0 {
			fmt.Fprintf(t.stdout, "%s: node %s: no address of %v is handed out, reserved or published\n", p.Network, p.NodeRanges, p.NodeRanges.Retired)
		}
	}
	return nil
}

func (t *tool) version([]string) error {
	fmt.Fprintf(t.stdout, "stickyip %s (store schema %d)\n", contract.Version, boltstore.SchemaVersion)
	return nil
}

// hintFor tells the operator what to do about a store error.
func hintFor(err error, dataDir string) string {
	db := filepath.Join(dataDir, boltstore.DBFile)
	switch {
	case errors.Is(err, reservation.ErrFutureSchema):
		return "This binary is older than the one that last wrote the store. Install the newer stickyip again; the file was not modified."
	case errors.Is(err, reservation.ErrCorrupt):
		return fmt.Sprintf(`The store is damaged; stickyip refuses to use it and has not modified it. To recover:
  1. keep a copy for analysis:   cp %[1]s %[1]s.broken
  2. move it aside:              mv %[1]s %[1]s.damaged-$(date +%%s)
  3. the next CNI call creates an empty store. Running pods keep their addresses on their
     interfaces but are no longer recorded: run "stickyip import" if host-local data exists,
     and let checkpointd (or a CNI GC) reconcile. Reservations in the damaged file are lost.`, db)
	case errors.Is(err, reservation.ErrLocked):
		return "Another process holds the store. Find it with: fuser -v " + filepath.Join(dataDir, boltstore.LockFile) + " " + db
	case errors.Is(err, reservation.ErrIO):
		return "Check that " + dataDir + " exists, is writable by root, and that its filesystem is not full or read-only."
	}
	return ""
}
