// Command pause is the pod sandbox process of the harness's pause image: it
// waits for SIGTERM or SIGINT and exits 0, reaping orphans meanwhile (it is
// PID 1 of the pod's PID namespace).
//
// As a test container it can first prove what a container can do, and exit 1
// (so the kubelet reports the container failed) when it cannot:
//
//	/pause -read /cred/password -read /config/app.conf -env MODE=replica
//	/pause -read /cred/password -exit          # an init container
//
// -read FILE: FILE must be readable by the container's user, and not empty.
// -env K=V: the environment variable K must be V.
// -exit: exit 0 after the checks instead of waiting (a Job, an init container).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var reads, envs list
	flag.Var(&reads, "read", "a file the container must be able to read (repeatable)")
	flag.Var(&envs, "env", "K=V: an environment variable the container must have (repeatable)")
	exit := flag.Bool("exit", false, "exit 0 after the checks")
	flag.Parse()
	failed := false
	for _, f := range reads {
		data, err := os.ReadFile(f)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "pause: uid %d gid %d groups %v cannot read %s: %v\n", os.Getuid(), os.Getgid(), groups(), f, err)
			failed = true
		case len(data) == 0:
			fmt.Fprintf(os.Stderr, "pause: %s is empty\n", f)
			failed = true
		default:
			fmt.Printf("pause: uid %d read %s (%d bytes)\n", os.Getuid(), f, len(data))
		}
	}
	for _, kv := range envs {
		k, v, _ := strings.Cut(kv, "=")
		if got, ok := os.LookupEnv(k); !ok || got != v {
			fmt.Fprintf(os.Stderr, "pause: env %s=%q, want %q\n", k, got, v)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
	if *exit {
		os.Exit(0)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

func groups() []int {
	g, _ := os.Getgroups()
	return g
}
