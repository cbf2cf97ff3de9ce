// Command checkpointd saves opted-in pods of its node and restores them as
// static pods when the API server is away. It only wires flags (each with an
// environment fallback, CHECKPOINTD_<FLAG_NAME>) to daemon.Run, or, as
// `checkpointd cleanup [--all]`, to install.Cleanup, or, as `checkpointd
// install` and `checkpointd uninstall` (what the DaemonSet of deploy/install
// runs on every node; `checkpointd ready` is its readiness probe), to
// package install, or, as `checkpointd stranded`, lists the pods that wait
// for a node that no longer exists.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/daemon"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/install"
	"github.com/stickyip/stickyip/contract"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	clean, all, rebuildStore := false, false, false
	if len(args) > 0 {
		switch args[0] {
		case "cleanup":
			clean, args = true, args[1:]
		case "rebuild-store":
			rebuildStore, args = true, args[1:]
		case "install", "uninstall":
			return runInstall(args[0], args[1:])
		case "ready":
			return runReady(args[1:])
		case "stranded":
			return runStranded(args[1:])
		}
	}
	fs := flag.NewFlagSet("checkpointd", flag.ContinueOnError)
	var cfg config.Config
	logLevel := daemonFlags(fs, &cfg)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if clean {
		fs.BoolVar(&all, "all", false, "also remove the copies' files and every checkpoint, stored secret, mark, saved lease and the last API contact")
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: checkpointd [flags]
       checkpointd cleanup [--all] [flags]
       checkpointd rebuild-store [flags]
       checkpointd install|uninstall [flags]   (see checkpointd install --help)
       checkpointd ready --ready-file=FILE     (the installer DaemonSet's readiness probe)
       checkpointd stranded [--kubeconfig FILE] (pods waiting for a node that no longer exists)

cleanup removes the manifest of every static copy checkpointd placed on this
node (the systemd unit runs it whenever the daemon stops: the kubelet stops
those copies once it reaches the API server, and a restarted checkpointd
writes the same manifests back meanwhile); their files stay until the next
checkpointd pass after the copy stopped, or a reboot. With --all also the
copies' files and every checkpoint, stored secret, mark, saved flannel lease
and the last API contact. It takes the same directory flags as the daemon.

rebuild-store rebuilds a damaged or lost stickyip store once, as the daemon
does unless --rebuild-store=false: from the runtime's sandboxes, its CNI
result cache, the network namespaces and the checkpoints; the damaged file is
kept as stickyip.db.damaged-<time>. It reads no placement index.

Every flag can also be set with the environment variable CHECKPOINTD_<FLAG>, e.g. CHECKPOINTD_GRACE_PERIOD=30s.

`)
		fs.PrintDefaults()
	}
	if code := parse(fs, "checkpointd", args); code >= 0 {
		return code
	}
	if *showVersion {
		fmt.Println("checkpointd", contract.Version)
		return 0
	}
	var err error
	if cfg.Log, err = newLogger(*logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd:", err)
		return 2
	}

	if clean {
		removed, err := install.Cleanup(cfg, all)
		for _, p := range removed {
			fmt.Println("removed", p)
		}
		if err != nil {
			cfg.Log.Error("cleanup failed", "err", err)
			return 1
		}
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if rebuildStore {
		rebuilt, err := daemon.RebuildStore(ctx, cfg)
		if err != nil {
			cfg.Log.Error("rebuild-store failed", "err", err)
			return 1
		}
		if !rebuilt {
			fmt.Println("the store can be used: nothing to rebuild")
		}
		return 0
	}
	if err := daemon.Run(ctx, cfg); err != nil {
		cfg.Log.Error("checkpointd failed", "err", err)
		return 1
	}
	return 0
}

// daemonFlags defines the daemon's flags on fs, filling cfg; the install
// and uninstall commands take the same ones. It returns the log level flag.
func daemonFlags(fs *flag.FlagSet, cfg *config.Config) *string {
	fs.StringVar(&cfg.NodeName, "node-name", config.DefaultNodeName(), "this node's name as the API server knows it ($NODE_NAME, else the lower-cased host name)")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", contract.DefaultKubeconfig, `kubeconfig to reach the API server: the kubelet's, so checkpointd reads with the node's own identity ("in-cluster" or "": the pod's service account)`)
	fs.StringVar(&cfg.CheckpointDir, "checkpoint-dir", contract.DefaultCheckpointDir, "where checkpoint records are kept (0700; persistent disk)")
	fs.StringVar(&cfg.StaticPodDir, "static-pod-dir", contract.DefaultStaticPodDir, "the kubelet's staticPodPath (--kubelet-config overrides it)")
	fs.StringVar(&cfg.KubeletConfig, "kubelet-config", "", "the kubelet's KubeletConfiguration file (e.g. /var/lib/kubelet/config.yaml): its staticPodPath is used")
	fs.StringVar(&cfg.VolumeDir, "volume-dir", contract.DefaultVolumeDir, "a restored copy's secret and configMap files and per-boot state (0700; must be tmpfs)")
	fs.StringVar(&cfg.CRIEndpoint, "cri-endpoint", "unix:///run/containerd/containerd.sock", "container runtime CRI socket")
	fs.StringVar(&cfg.DataDir, "data-dir", contract.DefaultDataDir, `stickyip IPAM data directory ("": no IPAM reconciliation)`)
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", contract.DefaultCNIConfDir, `CNI network configs, read for pool sizes and the flannel networks; "": not read`)
	fs.StringVar(&cfg.FlannelSubnetFile, "flannel-subnet-file", flannel.SubnetFileFromCNI, `flanneld's subnet lease, kept across reboots and put back while flanneld has not written one; "auto": the subnetFile of the flannel plugin in --cni-conf-dir (default /run/flannel/subnet.env), none without a flannel network; "": not kept`)
	fs.StringVar(&cfg.AllowNamespaces, "allow-namespaces", "kube-system", `comma-separated namespaces whose opted-in pods may be checkpointed ("*": all)`)
	fs.StringVar(&cfg.AllowPrivilegedNamespaces, "allow-privileged-namespaces", "", `comma-separated namespaces whose pods may fail Pod Security Standards baseline controls (privileged, hostPID/hostIPC, hostPath, capabilities, ...; never hostNetwork or host ports) ("*": all allowed namespaces)`)
	fs.DurationVar(&cfg.Grace, "grace-period", time.Minute, "how long the API server must be unreachable before restoring, and a parent gone before its checkpoint is released")
	fs.DurationVar(&cfg.Stable, "api-stable-period", 30*time.Second, "how long the API server must answer again before a static copy is handed back")
	fs.DurationVar(&cfg.Interval, "interval", 5*time.Second, "reconcile period")
	fs.DurationVar(&cfg.ProbeInterval, "api-probe-interval", 5*time.Second, "API server reachability probe period")
	fs.DurationVar(&cfg.Timeout, "timeout", 5*time.Second, "timeout of each API request, CRI and IPAM store call (not of the long-lived pod watch)")
	fs.DurationVar(&cfg.Refresh, "refresh", 10*time.Minute, "re-read secrets and configMaps of unchanged pods this often")
	fs.DurationVar(&cfg.LeakMinAge, "leak-min-age", 2*time.Minute, "allocations younger than this are never treated as leaked")
	fs.DurationVar(&cfg.RestoreTimeout, "restore-timeout", 2*time.Minute, "a restored copy whose sandbox does not run after this is reported")
	fs.DurationVar(&cfg.CorruptRetention, "corrupt-retention", 7*24*time.Hour, "corrupt checkpoints set aside are deleted after this (0: kept)")
	fs.StringVar(&cfg.Reservation, "restore-reservation", contract.DefaultRestoreReservation, "reservation annotation given to restored copies whose parent has none, so the parent gets the IP back")
	fs.StringVar(&cfg.Volumes, "volumes", "copy", "secrets/configMaps: copy (saved with the checkpoint, restored as read-only host files) or drop (restored as empty dirs; no secret access needed)")
	fs.StringVar(&cfg.ListenAddress, "listen-address", contract.DefaultListenAddress, `address for /healthz and /metrics ("": disabled)`)
	fs.BoolVar(&cfg.RebuildStore, "rebuild-store", true, "rebuild the stickyip store when it is damaged, or missing on a node that had one, from what the node knows (the damaged file is kept aside); false: report it and leave the node NotReady for the operator (checkpointd rebuild-store)")
	fs.StringVar(&cfg.CNIResultsDir, "cni-results-dir", contract.DefaultCNIResultsDir, "the container runtime's CNI result cache (libcni's), a source of a store rebuild")
	fs.BoolVar(&cfg.FollowStatefulSets, "follow-statefulsets", true, "make the reservations of StatefulSet pods end as their volume claims do, as stickyip-controller says in this node's NodeRecord (deploy/placement; needs --placement and --data-dir); false: every reservation lasts its duration after the pod's deletion, held ones from now")
	fs.BoolVar(&cfg.Placement, "placement", true, "publish this node's sticky identities in its NodeRecord (stickyip.io/v1, named after the node), from which stickyip-controller builds the placement index (deploy/placement; needs --data-dir and the node's own credentials)")
	return fs.String("log-level", "info", "debug, info, warn or error")
}

// parse parses args, then the CHECKPOINTD_* variables of flags not given,
// into fs. A code >= 0 means exit with it: 0 after --help, 2 for bad input
// (reported on stderr, prefixed with cmd).
func parse(fs *flag.FlagSet, cmd string, args []string) int {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %q\n", cmd, fs.Args())
		return 2
	}
	if err := envFallback(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
		return 2
	}
	return -1
}

// newLogger returns the text logger on stderr at level.
func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %v", level, err)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// envFallback sets every flag not given on the command line from
// CHECKPOINTD_<NAME> (upper case, '-' as '_') when that variable is set.
func envFallback(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		key := envName(f.Name)
		if v, ok := lookup(key); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", key, v, e)
			}
		}
	})
	return err
}
