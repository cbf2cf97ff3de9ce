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
	"os"
	"path/filepath"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

const usage = `stickyip — operator tool for the stickyip IPAM store

Usage:
  stickyip [STORE] list [--network NAME] [--json]
  stickyip [STORE] release NAMESPACE/NAME [--network NAME] [--ifname IF]
  stickyip [STORE] gc [--network NAME]
  stickyip [STORE] import --network NAME [--from DIR]
  stickyip [STORE] check [--json]
  stickyip [STORE] status [--network NAME] [--json]
  stickyip version

STORE is --data-dir DIR (also $STICKYIP_DATA_DIR): that store alone. Without
it, the stores the CNI configuration names: the data directory of every
network in --cni-conf-dir DIR (default ` + contract.DefaultCNIConfDir + `) whose IPAM
is stickyip, else ` + contract.DefaultDataDir + `. Both flags go before or after
the command.
Exit codes: 0 ok, 1 problems found or nothing to do, 2 error.
`

type tool struct {
	stdout, stderr io.Writer
	dataDir        dirFlag // --data-dir: this store alone
	confDir        string  // --cni-conf-dir: the CNI configuration, which names the stores otherwise
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
	t.dataDir.dir = contract.DefaultDataDir
	if d := os.Getenv("STICKYIP_DATA_DIR"); d != "" {
		t.dataDir = dirFlag{dir: d, set: true}
	}
	global.Var(&t.dataDir, "data-dir", "the store's data directory (default: the CNI configuration's)")
	global.StringVar(&t.confDir, "cni-conf-dir", contract.DefaultCNIConfDir, "the CNI configuration: the networks, their stores and ranges")
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
		if hint := hintFor(err, failedStore(err, t.dataDir.dir)); hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		return 2
	}
	return 0
}

var errNothing = errors.New("nothing to do")

// flags returns a flag set for a subcommand that also accepts --data-dir
// and --cni-conf-dir.
func (t *tool) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("stickyip "+name, flag.ContinueOnError)
	fs.SetOutput(t.stderr)
	fs.Var(&t.dataDir, "data-dir", "the store's data directory (default: the CNI configuration's)")
	fs.StringVar(&t.confDir, "cni-conf-dir", t.confDir, "the CNI configuration: the networks, their stores and ranges")
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

// hintFor tells the operator what to do about a store error.
func hintFor(err error, dataDir string) string {
	db := filepath.Join(dataDir, boltstore.DBFile)
	switch {
	case errors.Is(err, reservation.ErrFutureSchema):
		return "This binary is older than the one that last wrote the store. Install the newer stickyip again; the file was not modified."
	case errors.Is(err, reservation.ErrCorrupt):
		return fmt.Sprintf(`The store is damaged; stickyip refuses to use it and has not modified it.
checkpointd rebuilds it from what the node knows (running sandboxes, the runtime's CNI
result cache, its checkpoints, the node's placement entries) and keeps this file as
%[1]s.damaged-<time>, unless it runs with --rebuild-store=false.
Then, after looking at it: checkpointd rebuild-store (same flags as the daemon) rebuilds it
once. See docs/troubleshooting.md, "Error 102".`, db)
	case errors.Is(err, reservation.ErrLost):
		return fmt.Sprintf(`The store file is missing, but %[2]s says this node had one: the addresses its
running pods hold are unknown, so no CNI call uses an empty store in its place.
checkpointd rebuilds it from what the node knows, unless it runs with --rebuild-store=false;
then run: checkpointd rebuild-store (same flags as the daemon). See docs/troubleshooting.md, "Error 102".`,
			db, filepath.Join(dataDir, boltstore.MarkFile))
	case errors.Is(err, reservation.ErrLocked):
		return "Another process holds the store. Find it with: fuser -v " + filepath.Join(dataDir, boltstore.LockFile) + " " + db
	case errors.Is(err, reservation.ErrIO):
		return "Check that " + dataDir + " exists, is writable by root, and that its filesystem is not full or read-only."
	}
	return ""
}
