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
//
// Between pods (the e2e's pod-to-pod checks across nodes):
//
//	/pause -serve :7070                      # answers pings while it waits
//	/pause -dial 10.244.1.2:7070 -exit       # one ping, run by CRI exec in another pod
//
// -serve ADDR: listen on TCP ADDR and answer each connection's one line with
// "pong from <hostname>: <line>" (the hostname is the pod's name).
// -dial ADDR: send "ping from <hostname>" to ADDR and print the answer; fail
// unless a pong comes back within dialTimeout.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// dialTimeout bounds a -dial exchange, and each connection -serve answers.
const dialTimeout = 5 * time.Second

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var reads, envs list
	flag.Var(&reads, "read", "a file the container must be able to read (repeatable)")
	flag.Var(&envs, "env", "K=V: an environment variable the container must have (repeatable)")
	exit := flag.Bool("exit", false, "exit 0 after the checks")
	serve := flag.String("serve", "", "TCP address to answer pings on while waiting")
	dial := flag.String("dial", "", "TCP address to ping once (fails without a pong)")
	flag.Parse()
	failed := false
	if *dial != "" {
		reply, err := ping(*dial)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pause: ping %s: %v\n", *dial, err)
			failed = true
		} else {
			fmt.Printf("pause: %s answered %q\n", *dial, reply)
		}
	}
	if *serve != "" {
		ln, err := net.Listen("tcp", *serve)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pause: listen %s: %v\n", *serve, err)
			os.Exit(1)
		}
		go answer(ln)
	}
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

// ping sends one line to addr and returns the pong that answers it.
func ping(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(c, "ping from %s\n", hostname()); err != nil {
		return "", err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer: %w", err)
	}
	reply = strings.TrimSuffix(reply, "\n")
	if !strings.HasPrefix(reply, "pong from ") {
		return "", fmt.Errorf("answer %q is not a pong", reply)
	}
	return reply, nil
}

// answer answers each connection of ln with a pong naming this host.
func answer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pause: accept: %v\n", err)
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(dialTimeout))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprintf(c, "pong from %s: %s\n", hostname(), strings.TrimSuffix(line, "\n"))
		}()
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}

func groups() []int {
	g, _ := os.Getgroups()
	return g
}
