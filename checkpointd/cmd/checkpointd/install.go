package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/install"
)

// runInstall runs `checkpointd install` or `checkpointd uninstall` (cmd):
// what the DaemonSet of deploy/install runs on every node.
func runInstall(cmd string, args []string) int {
	fs := flag.NewFlagSet("checkpointd "+cmd, flag.ContinueOnError)
	var cfg config.Config
	logLevel := daemonFlags(fs, &cfg)
	daemonSet := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { daemonSet[f.Name] = true })
	binDir := fs.String("cni-bin-dir", "/opt/cni/bin", "the node's CNI bin directory")
	plugin := fs.String("plugin", "/stickyip", "the plugin binary to install (its path in the image)")
	image := fs.String("image", "", "image of checkpointd's static pod: the image this installer runs from")
	staticPod := fs.Bool("static-pod", true, "run checkpointd as a static pod (false: the operator runs the systemd unit)")
	wait := fs.Bool("wait", false, "after installing, wait for SIGTERM (the DaemonSet's container keeps running, and so keeps the image on the node)")
	stopWait := fs.Duration("stop-timeout", 2*time.Minute, "uninstall: how long to wait for the kubelet to stop checkpointd")
	readyFile := fs.String("ready-file", "", "once done, create this file (checked by checkpointd ready, the DaemonSet's readiness probe: a rollout moves on to the next node only once this one is done)")
	fs.Usage = func() { installUsage(fs) }
	if code := parse(fs, "checkpointd "+cmd, args); code >= 0 {
		return code
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "checkpointd %s: %v\n", cmd, err)
		return 2
	}
	cfg.Log = log
	node := install.Node{PluginSource: *plugin, CNIBinDir: *binDir}
	if node.StaticPodDir, err = cfg.ResolveStaticPodDir(); err != nil {
		log.Error(cmd+" failed", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var lines []string
	if cmd == "install" {
		if *staticPod {
			// A setting the daemon would refuse fails here, not in a
			// crash-looping static pod.
			if err := cfg.Validate(); err != nil {
				log.Error("install failed", "err", err)
				return 2
			}
			if *image == "" {
				fmt.Fprintln(os.Stderr, "checkpointd install: --image is required for the static pod (or --static-pod=false)")
				return 2
			}
			if node.Pod, err = staticPodFor(fs, daemonSet, cfg, *image); err != nil {
				log.Error("install failed", "err", err)
				return 1
			}
		}
		lines, err = node.Install()
	} else {
		var removed []string
		removed, err = node.Uninstall(ctx, cfg, *stopWait)
		for _, p := range removed {
			lines = append(lines, "removed "+p)
		}
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	if err != nil {
		log.Error(cmd+" failed", "err", err)
		return 1
	}
	return installed(ctx, log, cmd, *readyFile, *wait)
}

// installed marks the node done (readyFile, when set: the DaemonSet's
// readiness probe reads it) and, with wait, waits for ctx to end.
func installed(ctx context.Context, log *slog.Logger, cmd, readyFile string, wait bool) int {
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte(cmd+" done\n"), 0o644); err != nil {
			log.Error(cmd+" done, but not marked ready", "err", err)
			return 1
		}
	}
	if wait {
		log.Info(cmd + " done; waiting for SIGTERM")
		<-ctx.Done()
	}
	return 0
}

// installUsage prints the usage of install and uninstall.
func installUsage(fs *flag.FlagSet) {
	fmt.Fprintf(fs.Output(), `Usage: checkpointd install --image=REF [flags]
       checkpointd uninstall [flags]

install copies the plugin into --cni-bin-dir and writes checkpointd's static pod
(image --image, the node's kubeconfig, every CHECKPOINTD_* setting and daemon flag
given here) into the kubelet's static pod directory, each atomically and only when
it changed. uninstall removes the static pod, waits for checkpointd to stop, runs
cleanup --all and removes the plugin; the IPAM store stays.

`)
	fs.PrintDefaults()
}

// staticPodFor describes checkpointd's static pod with the daemon settings
// this command was given (flags or CHECKPOINTD_* variables), passed on as
// CHECKPOINTD_* variables, and the node's name.
func staticPodFor(fs *flag.FlagSet, daemonSet map[string]bool, cfg config.Config, image string) (*install.StaticPod, error) {
	mounts, err := install.Mounts(cfg)
	if err != nil {
		return nil, err
	}
	env := []corev1.EnvVar{{Name: "NODE_NAME", Value: cfg.NodeName}}
	var set []corev1.EnvVar
	fs.Visit(func(f *flag.Flag) {
		if daemonSet[f.Name] {
			set = append(set, corev1.EnvVar{Name: envName(f.Name), Value: f.Value.String()})
		}
	})
	sort.Slice(set, func(i, j int) bool { return set[i].Name < set[j].Name })
	return &install.StaticPod{Image: image, Env: append(env, set...), Mounts: mounts, ListenAddress: cfg.ListenAddress}, nil
}

// envName is the CHECKPOINTD_* variable of flag name.
func envName(name string) string {
	return "CHECKPOINTD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// runReady runs `checkpointd ready`, the readiness probe of deploy/install's
// DaemonSet: it exits 0 once the install or uninstall of this pod has
// created its --ready-file (CHECKPOINTD_READY_FILE), else 1.
func runReady(args []string) int {
	fs := flag.NewFlagSet("checkpointd ready", flag.ContinueOnError)
	readyFile := fs.String("ready-file", "", "the file that checkpointd install or uninstall --ready-file creates once done")
	if code := parse(fs, "checkpointd ready", args); code >= 0 {
		return code
	}
	if *readyFile == "" {
		fmt.Fprintln(os.Stderr, "checkpointd ready: --ready-file (or CHECKPOINTD_READY_FILE) is required")
		return 2
	}
	if _, err := os.Stat(*readyFile); err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd ready: not done yet:", err)
		return 1
	}
	return 0
}
